// A small CSV reader for the preview (RFC 4180: quoted fields with
// doubled quotes, CRLF or LF line ends). It returns strings only, which
// the page shows as text: a cell is never markup.

export interface CSVTable {
  rows: string[][];
  /** truncated: the file holds more rows than those read. */
  truncated: boolean;
}

/** delimiterFor guesses the separator of a file from its name and first line. */
export function delimiterFor(name: string, firstLine: string): string {
  if (/\.tsv$/i.test(name)) return "\t";
  const counts = [",", ";", "\t"].map((d) => ({ d, n: firstLine.split(d).length - 1 }));
  counts.sort((a, b) => b.n - a.n);
  return counts[0].n > 0 ? counts[0].d : ",";
}

/**
 * parseCSV reads at most maxRows rows of text. complete says whether text
 * is the whole file: when it is only the file's head, the last line is
 * dropped (it may be cut), and the table is marked truncated.
 */
export function parseCSV(text: string, delimiter: string, maxRows: number, complete: boolean): CSVTable {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = "";
  let quoted = false;
  let i = 0;
  if (text.charCodeAt(0) === 0xfeff) i = 1; // a byte order mark
  const endRow = () => {
    row.push(field);
    field = "";
    rows.push(row);
    row = [];
  };
  for (; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c !== '"') field += c;
      else if (text[i + 1] === '"') {
        field += '"';
        i++;
      } else quoted = false;
      continue;
    }
    if (c === '"' && field === "") quoted = true;
    else if (c === delimiter) {
      row.push(field);
      field = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      endRow();
      if (rows.length > maxRows) break;
    } else field += c;
  }
  // A last line without a line end is whole when text is the whole file,
  // and may be cut when it is only the head (then it is dropped).
  if (rows.length <= maxRows && complete && (field !== "" || row.length > 0)) endRow();
  const truncated = rows.length > maxRows || !complete;
  return { rows: rows.slice(0, maxRows), truncated };
}
