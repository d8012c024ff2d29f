// The page's own routes (hashes) and the gateway's workspace and run routes, built
// in one place: every id and path segment is encoded, so a file named
// "a b/#c?" is one path, never a query or a fragment.

/** runHash is the run page of run id. */
export function runHash(id: string): string {
  return `#/runs/${encodeURIComponent(id)}`;
}

/** runAPI is the gateway route /v1/runs/{id}/{rest}. */
export function runAPI(id: string, rest: string): string {
  return `/v1/runs/${encodeURIComponent(id)}/${rest}`;
}

/**
 * workspaceHash is the workspace view of ws: at revision rev (the head
 * when empty), with the file path selected (none when empty).
 */
export function workspaceHash(ws: string, rev = "", path = ""): string {
  let h = `#/workspaces/${encodeURIComponent(ws)}`;
  if (rev || path) h += `/${encodeURIComponent(rev || HEAD)}`;
  if (path) h += `/${encodePath(path)}`;
  return h;
}

/** HEAD stands for the head revision in a workspace hash. */
export const HEAD = "head";

/** encodePath encodes each segment of a slash-separated path. */
export function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** workspaceAPI is the gateway route /v1/workspaces/{ws}/{rest}. */
export function workspaceAPI(ws: string, rest: string): string {
  return `/v1/workspaces/${encodeURIComponent(ws)}/${rest}`;
}

/** fileURL is the bytes of path at revision rev (GET, also an <img> source and a download). */
export function fileURL(ws: string, path: string, rev: string): string {
  const q = rev ? `?rev=${encodeURIComponent(rev)}` : "";
  return workspaceAPI(ws, `files/${encodePath(path)}${q}`);
}
