// Time formatting for tables and the events timeline.

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
