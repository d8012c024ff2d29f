// The workspace view (#/workspaces/<id>[/<rev>|head[/<path>]]): the file
// tree of one revision with a preview of the file chosen, drag-and-drop
// upload (editors), the revision history with restore, and a diff between
// two revisions. Without a revision in the route it follows the head:
// a step or a person writing meanwhile shows up within a few seconds.

import { AUTHOR_STEP, ApiError, call, callPages, errorText, type Me, type Operation, type Revision, sendBytes, type TreeEntry, type Workspace } from "./api";
import { diffView } from "./diff";
import { h, replace, setText } from "./dom";
import { bytes, dateTime, printable } from "./format";
import { authorView, historyView, revisionLabel } from "./history";
import { encodePath, workspaceAPI, workspaceHash } from "./links";
import type { Page } from "./page";
import { renderPreview } from "./preview";
import { buildTree, findNode, parents, renderTree, type TreeNode } from "./tree";

const pollEvery = 5000;
/** historyWant is how many of the newest revisions the history shows. */
const historyWant = 200;

/** canWrite says whether the caller's role may write to a workspace (viewers read only). */
export function canWrite(me: Me): boolean {
  return me.role === "editor" || me.role === "admin" || me.role === "owner";
}

/** canWriteLibrary: only an admin or owner not limited to some workspaces changes the account library. */
export function canWriteLibrary(me: Me): boolean {
  return (me.role === "admin" || me.role === "owner") && !(me.workspaces && me.workspaces.length > 0);
}

/** conflictPaths are the paths a 409 answer names (its error's detached revision's), else the ones tried. */
export function conflictPaths(answer: unknown, tried: string[]): string[] {
  const named = (answer as { error?: { revision?: Revision } } | undefined)?.error?.revision?.conflict;
  return Array.isArray(named) && named.length > 0 ? named.map(String) : tried;
}

/** workspacePage shows workspace ws at revision rev (the head when empty) with path chosen. */
export function workspacePage(root: HTMLElement, me: Me, ws: string, rev: string, path: string, go: (hash: string) => void): Page {
  let writer = canWrite(me);
  const follow = rev === "";
  let disposed = false;
  let timer: number | undefined;
  let history: Revision[] = [];
  let head: Revision | undefined;
  let shown: Revision | undefined;
  let tree: TreeNode = buildTree([]);
  let selected = path;
  let uploadDir = "";
  let preview: AbortController | undefined;
  let uploading = false;
  let loaded = false;
  let more = false;
  // running serialises the reads: a poll and an upload's refresh never overlap.
  let running: Promise<void> = Promise.resolve();
  // stepRuns maps the steps of the workspace's newest runs to their runs,
  // for authors whose revision does not name its run.
  const stepRuns = new Map<string, string>();
  const runOf = (step: string) => stepRuns.get(step);
  let runsReadAt: string | undefined; // the head when the runs were last read

  const name = h("span", { id: "ws-name" }, ws);
  const revEl = h("span", { id: "ws-rev", "data-testid": "ws-rev", class: "mono" });
  const revFacts = h("p", { id: "ws-rev-facts", class: "muted" });
  const headNote = h("p", { id: "ws-head-note", class: "note", hidden: true });
  const detachedPaths = h("ul", { id: "ws-detached-paths", class: "files" });
  const detached = h("div", { id: "ws-detached", class: "warning", role: "alert", hidden: true }, h("p", {}, "This revision is detached: its writer's changes conflicted with a newer revision, so it is not on the history. Conflicting paths:"), detachedPaths);
  const pageError = h("p", { id: "ws-error", class: "error", role: "alert" });

  const treeList = h("ul", { id: "ws-tree", "data-testid": "ws-tree", class: "tree" });
  const uploadInput = h("input", { id: "ws-upload-input", "data-testid": "ws-upload-input", type: "file", multiple: true, class: "visually-hidden" });
  const uploadButton = h("label", { for: "ws-upload-input", class: "button" }, "Upload files");
  const uploadTarget = h("span", { id: "ws-upload-dir", "data-testid": "ws-upload-dir", class: "mono" });
  const uploadStatus = h("p", { id: "ws-upload-status", "data-testid": "ws-upload-status", class: "muted", "aria-live": "polite" });
  const uploadError = h("p", { id: "ws-upload-error", "data-testid": "ws-upload-error", class: "error", role: "alert" });
  const conflictList = h("ul", { id: "ws-conflict", "data-testid": "ws-conflict", class: "files", hidden: true, "aria-label": "conflicting paths" });
  const upload = h("div", { class: "upload" }, h("div", { class: "row" }, uploadButton, uploadInput, h("span", { class: "muted" }, "or drop files on the tree, into "), uploadTarget), uploadStatus, uploadError, conflictList);
  const readOnly = h("p", { class: "muted", id: "ws-read-only" });
  const archive = h("a", { id: "ws-archive", "data-testid": "ws-archive", class: "small-link", hidden: true }, "all files (.tar.gz)");
  const treeCard = h(
    "div",
    { class: "card ws-tree", id: "ws-tree-card", "data-testid": "ws-drop" },
    h("div", { class: "row" }, h("h2", {}, "Files"), h("span", { class: "spacer" }), archive),
    treeList,
  );
  // showWriter offers uploads to a writer only: a reader's page holds none
  // of their controls (the gateway refuses their writes anyway).
  const showWriter = (why: string) => {
    upload.remove();
    readOnly.remove();
    if (writer) treeCard.append(upload);
    else {
      setText(readOnly, why);
      treeCard.append(readOnly);
    }
  };
  showWriter(`You read this workspace as ${me.role}: uploads and restores need an editor.`);
  const previewBox = h("div", { id: "ws-preview", "data-testid": "ws-preview", class: "card ws-preview" }, h("p", { class: "muted" }, "Choose a file to preview it."));

  const diff = diffView(ws);
  const hist = historyView({
    ws,
    me,
    canWrite: () => writer,
    runOf,
    diff: (a, b) => void diff.show(a, b),
    restored: () => go(workspaceHash(ws)),
  });

  root.appendChild(
    h(
      "section",
      { class: "workspace" },
      h(
        "div",
        { class: "card run-head" },
        h("a", { href: "#/runs", class: "back" }, "\u2190 runs"),
        h("h1", {}, "Workspace ", name, " ", revEl),
        revFacts,
        headNote,
        detached,
        pageError,
      ),
      h("div", { class: "ws-main" }, treeCard, previewBox),
      hist.el,
      diff.el,
    ),
  );

  // --- the revision shown ------------------------------------------------

  function showTarget(): void {
    setText(uploadTarget, uploadDir ? printable(uploadDir) + "/" : "the top folder");
  }

  function choose(n: TreeNode): void {
    if (n.children) {
      uploadDir = n.path;
      showTarget();
      return;
    }
    uploadDir = parents(n.path).pop() ?? "";
    showTarget();
    select(n.path);
  }

  function select(p: string): void {
    selected = p;
    for (const el of treeList.querySelectorAll<HTMLElement>("[aria-current]")) el.removeAttribute("aria-current");
    const node = findNode(tree, p);
    preview?.abort();
    if (!node || !node.entry || !shown) {
      replace(previewBox, h("p", { class: "muted", id: "ws-preview-missing" }, p ? `${printable(p)} is not in this revision.` : "Choose a file to preview it."));
      delete previewBox.dataset.path;
      return;
    }
    for (const el of treeList.querySelectorAll<HTMLElement>("button.tree-file")) {
      if (el.dataset.path === p) el.setAttribute("aria-current", "true");
    }
    // The route names the file, so that the view can be linked; no reload.
    history_replace(workspaceHash(ws, rev, p));
    preview = new AbortController();
    void renderPreview(previewBox, ws, shown.id, node.entry, preview.signal);
  }

  function history_replace(hash: string): void {
    if (location.hash !== hash) window.history.replaceState(null, "", hash);
  }

  function renderRevision(): void {
    if (!shown) {
      setText(revEl, "");
      setText(revFacts, "No revisions yet: upload a file, or run a step in this workspace.");
      detached.hidden = true;
      headNote.hidden = true;
      return;
    }
    setText(revEl, `${revisionLabel(shown)}`);
    revEl.title = shown.id;
    revEl.dataset.rev = shown.id;
    replace(revFacts, `${shown.id} \u00b7 ${shown.files} files, ${bytes(shown.bytes)} \u00b7 by `, authorView(shown, me, runOf), ` \u00b7 ${dateTime(shown.created_at)}`, shown.message ? ` \u00b7 ${printable(shown.message)}` : "");
    detached.hidden = !shown.detached;
    replace(detachedPaths, (shown.conflict ?? []).map((p) => h("li", { "data-path": p }, h("code", {}, printable(p)))));
    const behind = !!head && !shown.detached && head.id !== shown.id;
    headNote.hidden = !behind;
    if (behind && head) {
      replace(headNote, `This is an older revision; the head is ${revisionLabel(head)}. `, h("a", { href: workspaceHash(ws, "", selected), id: "ws-to-head" }, "Show the head"));
    }
  }

  async function loadTree(r: Revision | undefined): Promise<void> {
    const entries = r ? await callPages<TreeEntry>(workspaceAPI(ws, `tree?rev=${encodeURIComponent(r.id)}&limit=1000`), { maxPages: 100 }) : [];
    if (disposed) return;
    shown = r;
    tree = buildTree(entries);
    loaded = true;
    treeList.dataset.rev = r?.id ?? "";
    archive.hidden = !r;
    if (r) {
      archive.setAttribute("href", workspaceAPI(ws, `archive?rev=${encodeURIComponent(r.id)}`));
      archive.setAttribute("download", `${ws}-${r.number || r.id}.tar.gz`);
    }
    renderTree(treeList, tree, choose, new Set(["", ...parents(selected), uploadDir]));
    renderRevision();
    if (selected) select(selected);
  }

  async function loadHistory(): Promise<void> {
    const revs = await callPages<Revision>(workspaceAPI(ws, `revisions?limit=100`), { want: historyWant, maxPages: 2 });
    if (disposed) return;
    history = revs.slice(0, historyWant);
    more = revs.length > historyWant;
    head = history.find((r) => !r.detached);
    await learnRuns();
    if (disposed) return;
    hist.update(history, shown?.id ?? "", head?.id ?? "", more, stepRuns.size);
    diff.revisions(history);
  }

  // learnRuns reads the workspace's newest runs when a step authored a
  // revision whose run is not known yet.
  async function learnRuns(): Promise<void> {
    const unknown = history.some((r) => r.author.kind === AUTHOR_STEP && !r.run && !stepRuns.has(r.step || r.author.id));
    if (!unknown || runsReadAt === head?.id) return;
    runsReadAt = head?.id;
    try {
      const ops = await callPages<Operation>(`/v1/runs?workspace=${encodeURIComponent(ws)}&limit=100`, { want: 100, maxPages: 1 });
      for (const op of ops) for (const s of op.steps ?? []) stepRuns.set(s.id, op.id);
    } catch {
      // The authors are shown without their runs.
    }
  }

  async function refresh(): Promise<void> {
    try {
      const before = head?.id;
      await loadHistory();
      if (disposed) return;
      if (follow) {
        if (!loaded || head?.id !== before) await loadTree(head);
      } else if (!shown) {
        const r = history.find((x) => x.id === rev) ?? (await call<Revision>("GET", workspaceAPI(ws, `revisions/${encodeURIComponent(rev)}`)));
        await loadTree(r);
      } else {
        renderRevision();
      }
      if (disposed) return;
      hist.update(history, shown?.id ?? "", head?.id ?? "", more, stepRuns.size);
      setText(pageError, "");
    } catch (err) {
      if (disposed) return;
      setText(pageError, errorText(err));
      if (err instanceof ApiError && (err.status === 403 || err.status === 404)) return;
    }
    if (!disposed && timer === undefined) timer = window.setTimeout(() => void refreshNow(), pollEvery);
  }

  // --- upload --------------------------------------------------------------

  async function uploadFiles(files: File[]): Promise<void> {
    if (!writer || uploading || files.length === 0) return;
    uploading = true;
    setText(uploadError, "");
    conflictList.hidden = true;
    replace(conflictList);
    // Each file is one revision; each PUT names the revision the person
    // saw (then the one the previous file made), so a path someone else
    // changed meanwhile is refused as a conflict, never overwritten.
    let base = shown?.id ?? "";
    let last = "";
    for (const [i, f] of files.entries()) {
      const p = uploadDir ? `${uploadDir}/${f.name}` : f.name;
      setText(uploadStatus, `uploading ${printable(p)} (${bytes(f.size)}, ${i + 1} of ${files.length})\u2026`);
      try {
        const headers: Record<string, string> = base ? { "If-Match": base } : {};
        const r = await sendBytes<Revision>("PUT", workspaceAPI(ws, `files/${encodePath(p)}`), f, headers);
        base = r.id;
        last = p;
      } catch (err) {
        uploading = false;
        setText(uploadStatus, "");
        if (err instanceof ApiError && err.status === 409) {
          const paths = conflictPaths(err.answer, [p]);
          setText(uploadError, `conflict: ${paths.map(printable).join(", ")} changed since ${shown ? revisionLabel(shown) : "the revision shown"}; nothing was overwritten (${err.message})`);
          replace(conflictList, paths.map((c) => h("li", { "data-path": c }, h("code", {}, printable(c)))));
          conflictList.hidden = false;
        } else {
          setText(uploadError, `upload of ${printable(p)} failed: ${errorText(err)}`);
        }
        // What was uploaded before stays: show it.
        if (last) await refreshNow();
        return;
      }
    }
    uploading = false;
    setText(uploadStatus, `uploaded ${files.length} file${files.length === 1 ? "" : "s"}`);
    if (disposed) return;
    // The head now holds the files: show it with the last one chosen.
    selected = last;
    if (follow) {
      history_replace(workspaceHash(ws, "", last));
      await refreshNow();
    } else go(workspaceHash(ws, "", last));
  }

  function refreshNow(): Promise<void> {
    if (timer !== undefined) window.clearTimeout(timer);
    timer = undefined;
    running = running.then(refresh);
    return running;
  }

  uploadInput.addEventListener("change", () => {
    const files = [...(uploadInput.files ?? [])];
    uploadInput.value = "";
    void uploadFiles(files);
  });
  treeCard.addEventListener("dragover", (ev) => {
    if (!ev.dataTransfer?.types.includes("Files")) return;
    // Taken even from a reader, so that a dropped file is never opened in place of the page.
    ev.preventDefault();
    ev.dataTransfer.dropEffect = writer ? "copy" : "none";
    if (writer) treeCard.classList.add("dropping");
  });
  treeCard.addEventListener("dragleave", (ev) => {
    if (!treeCard.contains(ev.relatedTarget as Node | null)) treeCard.classList.remove("dropping");
  });
  treeCard.addEventListener("drop", (ev) => {
    ev.preventDefault();
    treeCard.classList.remove("dropping");
    if (!writer) return;
    // A dropped folder has no bytes to send: only files are uploaded.
    const items = [...(ev.dataTransfer?.items ?? [])];
    const files = [...(ev.dataTransfer?.files ?? [])].filter((_, i) => items[i]?.webkitGetAsEntry?.()?.isDirectory !== true);
    void uploadFiles(files);
  });
  showTarget();

  void (async () => {
    try {
      const all = await callPages<Workspace>("/v1/workspaces?limit=1000");
      let w = all.find((x) => x.id === ws);
      if (!w) {
        // The account library is in no list: ask for it by name.
        const lib = await call<Workspace>("GET", "/v1/library");
        if (lib?.id === ws) {
          w = lib;
          writer = canWriteLibrary(me);
          showWriter("Everyone reads the library; only an admin not limited to some workspaces changes it.");
          hist.update(history, shown?.id ?? "", head?.id ?? "", more, stepRuns.size);
        }
      }
      if (!disposed && w) {
        setText(name, w.name);
        name.title = w.id;
        document.title = `${w.name} \u00b7 Rodon`;
      }
    } catch {
      // The id stays shown; the other reads say what is wrong.
    }
  })();
  void refreshNow();

  return {
    dispose() {
      disposed = true;
      preview?.abort();
      if (timer !== undefined) window.clearTimeout(timer);
    },
  };
}
