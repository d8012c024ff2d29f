// The preview of one file of a workspace revision: an image through the
// files route (an <img> of the gateway's own origin, which the CSP
// allows), a CSV file as a table of its first rows, any other text with
// line numbers, and for every file a download link. Contents are shown as
// text nodes only, never parsed as markup.

import { ApiError, type TreeEntry } from "./api";
import { delimiterFor, parseCSV } from "./csv";
import { h, replace } from "./dom";
import { bytes, printable } from "./format";
import { fileURL } from "./links";

/** previewBytes is how much of a file the text and CSV previews read. */
export const previewBytes = 256 * 1024;
/** previewLines and previewRows bound what they show. */
export const previewLines = 5000;
export const previewRows = 200;

const imageExt = /\.(png|jpe?g|gif|webp|svg|bmp|ico|avif)$/i;
const csvExt = /\.(csv|tsv)$/i;

/** previewKind is how a file is shown: image, csv or text (binary once its bytes are seen). */
export function previewKind(path: string): "image" | "csv" | "text" {
  if (imageExt.test(path)) return "image";
  if (csvExt.test(path)) return "csv";
  return "text";
}

/** baseName is the last component of a path. */
export function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** looksBinary: a NUL byte in the first 8000 bytes, as git decides. */
export function looksBinary(b: Uint8Array): boolean {
  return b.subarray(0, 8000).includes(0);
}

/**
 * readHead reads at most max bytes of url (a Range request; a server that
 * ignores Range is read only that far), and whether that was the whole file.
 */
async function readHead(url: string, max: number, signal: AbortSignal): Promise<{ data: Uint8Array; complete: boolean }> {
  const res = await fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Range: `bytes=0-${max - 1}` }, signal });
  if (res.status === 416) return { data: new Uint8Array(0), complete: true };
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`.trim();
    try {
      const e = (await res.json()) as { error?: { code?: string; message?: string } };
      if (e.error?.message) message = e.error.message;
    } catch {
      // not JSON: keep the status
    }
    throw new ApiError(res.status, "http_" + res.status, message);
  }
  let total = -1;
  const range = res.headers.get("Content-Range")?.match(/\/(\d+)$/);
  if (res.status === 206 && range) total = Number(range[1]);
  else if (res.status === 200 && res.headers.get("Content-Length")) total = Number(res.headers.get("Content-Length"));
  const chunks: Uint8Array[] = [];
  let n = 0;
  const reader = res.body?.getReader();
  while (reader && n < max) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    n += value.length;
  }
  if (reader && n >= max) void reader.cancel();
  const data = new Uint8Array(Math.min(n, max));
  let off = 0;
  for (const c of chunks) {
    const part = c.subarray(0, data.length - off);
    data.set(part, off);
    off += part.length;
    if (off >= data.length) break;
  }
  const complete = total >= 0 ? data.length >= total : n < max;
  return { data, complete };
}

/**
 * renderPreview shows entry of revision rev of workspace ws in box; the
 * signal aborts its read when another file is chosen.
 */
export async function renderPreview(box: HTMLElement, ws: string, rev: string, entry: TreeEntry, signal: AbortSignal): Promise<void> {
  const url = fileURL(ws, entry.path, rev);
  const download = h("a", { id: "ws-download", "data-testid": "ws-download", href: url, download: baseName(entry.path), class: "button" }, "Download");
  const facts = h(
    "p",
    { class: "muted preview-facts" },
    entry.type === "symlink" ? `symlink to ${printable(entry.target ?? "")}` : bytes(entry.size),
    entry.sha256 ? h("code", { title: "sha256" }, ` ${entry.sha256.slice(0, 12)}`) : null,
    entry.mode & 0o111 ? " executable" : null,
  );
  const body = h("div", { id: "ws-preview-body", class: "preview-body" });
  replace(
    box,
    h("div", { class: "row" }, h("h3", { id: "ws-preview-path", class: "mono" }, printable(entry.path)), h("span", { class: "spacer" }), entry.type === "file" ? download : null),
    facts,
    body,
  );
  box.dataset.path = entry.path;
  if (entry.type !== "file") {
    box.dataset.kind = entry.type;
    return;
  }
  const kind = previewKind(entry.path);
  box.dataset.kind = kind;
  if (kind === "image") {
    const img = h("img", { id: "ws-image", "data-testid": "ws-image", src: url, alt: baseName(entry.path), class: "preview-image" });
    const note = h("p", { class: "muted", id: "ws-image-note" });
    img.addEventListener("load", () => {
      img.dataset.loaded = "true";
      note.textContent = `${img.naturalWidth} \u00d7 ${img.naturalHeight}`;
    });
    img.addEventListener("error", () => {
      img.dataset.loaded = "false";
      note.textContent = "This image cannot be shown; download it instead.";
    });
    replace(body, img, note);
    return;
  }
  replace(body, h("p", { class: "muted" }, "loading\u2026"));
  let head: { data: Uint8Array; complete: boolean };
  try {
    head = await readHead(url, previewBytes, signal);
  } catch (err) {
    if (signal.aborted) return;
    replace(body, h("p", { class: "error", id: "ws-preview-error", role: "alert" }, err instanceof Error ? err.message : String(err)));
    return;
  }
  if (signal.aborted) return;
  if (looksBinary(head.data)) {
    box.dataset.kind = "binary";
    replace(body, h("p", { class: "muted", id: "ws-binary" }, `A binary file of ${bytes(entry.size)}: download it to open it.`));
    return;
  }
  const text = new TextDecoder("utf-8").decode(head.data);
  if (kind === "csv") {
    const firstLine = text.slice(0, text.search(/\r?\n|$/));
    const t = parseCSV(text, delimiterFor(entry.path, firstLine), previewRows, head.complete);
    const [first, ...rest] = t.rows;
    const table = h(
      "table",
      { id: "ws-csv", "data-testid": "ws-csv", class: "grid csv" },
      first ? h("thead", {}, h("tr", {}, first.map((c) => h("th", { scope: "col" }, c)))) : null,
      h("tbody", {}, rest.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))),
    );
    replace(
      body,
      h("div", { class: "scroll-x" }, table),
      t.truncated ? h("p", { class: "muted", id: "ws-truncated" }, `The first ${Math.max(0, t.rows.length - 1)} rows; download the file for all of it.`) : null,
    );
    return;
  }
  let lines = text.split(/\r?\n/);
  let cut = !head.complete;
  if (cut && lines.length > 1) lines.pop(); // the last line may be cut
  if (!cut && lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  if (lines.length > previewLines) {
    lines = lines.slice(0, previewLines);
    cut = true;
  }
  replace(
    body,
    h("ol", { id: "ws-text", "data-testid": "ws-text", class: "code" }, lines.map((l) => h("li", {}, l))),
    cut ? h("p", { class: "muted", id: "ws-truncated" }, `The first ${lines.length} lines; download the file for all of it.`) : null,
  );
}
