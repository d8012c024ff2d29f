// Time formatting for tables and the events timeline, and text shown
// safely (printable).

function pad(n: number, w = 2): string {
  return String(n).padStart(w, "0");
}

/** dateTime formats an RFC 3339 time as local "YYYY-MM-DD HH:MM:SS". */
export function dateTime(t: string | undefined): string {
  if (!t) return "";
  const d = new Date(t);
  if (isNaN(d.getTime())) return t;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(t)}`.replace(/\.\d+$/, "");
}

/** clock formats an RFC 3339 time as local "HH:MM:SS.mmm". */
export function clock(t: string | undefined): string {
  if (!t) return "";
  const d = new Date(t);
  if (isNaN(d.getTime())) return t;
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** since formats the time from a to b as "+1.234 s" or "+56 ms"; empty when either is missing. */
export function since(a: string | undefined, b: string | undefined): string {
  if (!a || !b) return "";
  const ms = Date.parse(b) - Date.parse(a);
  if (isNaN(ms)) return "";
  if (Math.abs(ms) < 1000) return `+${ms} ms`;
  return `+${(ms / 1000).toFixed(3)} s`;
}

// needsQuote matches what printable quotes: a control or format character
// (C0, DEL, C1, bidirectional overrides and isolates, zero-width ones), a
// lone surrogate, a leading quote, or a leading or trailing space.
const needsQuote = /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]|^["\s]|\s$/;

/**
 * printable is s as the page shows it on one line: as it is when it holds
 * only printable characters, else quoted with its control characters
 * escaped (JSON's escapes, as schedctl shows Go's), so that a file named
 * "x\n~y" reads as one name with a newline in it, not as two.
 */
export function printable(s: string): string {
  if (!needsQuote.test(s)) return s;
  return JSON.stringify(s).replace(/[\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/** bytes formats a size as "512 B", "1.5 KiB", "2.0 MiB". */
export function bytes(n: number | undefined): string {
  const v = n ?? 0;
  if (v < 1024) return `${v} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let x = v / 1024;
  let u = 0;
  while (x >= 1024 && u < units.length - 1) {
    x /= 1024;
    u++;
  }
  return `${x.toFixed(1)} ${units[u]}`;
}
