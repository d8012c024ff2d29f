// Splitting a command line typed into the new-run form into argv.

/**
 * splitArgs splits a command line on whitespace, with simple shell-like
 * quoting: '...' keeps everything literally, "..." keeps whitespace and
 * honours \" \\ \$ and \` escapes, and a backslash outside quotes escapes
 * the next character. There is no expansion of any kind. It throws on an
 * unterminated quote or a trailing backslash.
 */
export function splitArgs(line: string): string[] {
  const args: string[] = [];
  let cur = "";
  let inArg = false;
  let i = 0;
  while (i < line.length) {
    const c = line[i];
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      if (inArg) {
        args.push(cur);
        cur = "";
        inArg = false;
      }
      i++;
      continue;
    }
    inArg = true;
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new Error("unterminated ' quote");
      cur += line.slice(i + 1, end);
      i = end + 1;
    } else if (c === '"') {
      i++;
      for (;;) {
        if (i >= line.length) throw new Error('unterminated " quote');
        const d = line[i];
        if (d === '"') {
          i++;
          break;
        }
        if (d === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) {
          cur += line[i + 1];
          i += 2;
          continue;
        }
        cur += d;
        i++;
      }
    } else if (c === "\\") {
      if (i + 1 >= line.length) throw new Error("trailing backslash");
      cur += line[i + 1];
      i += 2;
    } else {
      cur += c;
      i++;
    }
  }
  if (inArg) args.push(cur);
  return args;
}
