// The files a step (or a whole run) changed in the workspace, from the
// payload of the node's files_changed events: a compact list with +
// (added), ~ (modified) and - (removed) markers, one path an item, each
// shown with printable (a name with a newline is one name).

import type { FilesChanged } from "./api";
import { h, replace } from "./dom";
import { printable } from "./format";

const kinds = [
  { key: "added", mark: "+", title: "added" },
  { key: "modified", mark: "~", title: "modified" },
  { key: "removed", mark: "-", title: "removed" },
] as const;

/** filesCount is the number of changed paths, named or not. */
export function filesCount(fc: FilesChanged): number {
  return (fc.added?.length ?? 0) + (fc.modified?.length ?? 0) + (fc.removed?.length ?? 0) + (fc.more ?? 0);
}

/**
 * renderFiles shows fc in list (a <ul>): one item per path, then "and N
 * more", or "no files changed". Without fc (no event yet) the list is
 * emptied and hidden. It redraws only when fc changed.
 */
export function renderFiles(list: HTMLElement, fc: FilesChanged | null | undefined): void {
  const key = fc ? JSON.stringify(fc) : "";
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  list.hidden = !fc;
  if (!fc) {
    delete list.dataset.count;
    replace(list);
    return;
  }
  const n = filesCount(fc);
  list.dataset.count = String(n);
  if (n === 0) {
    replace(list, h("li", { class: "muted files-none" }, "no files changed"));
    return;
  }
  replace(
    list,
    kinds.flatMap((k) =>
      (fc[k.key] ?? []).map((path) =>
        h(
          "li",
          { "data-change": k.key, "data-path": path, title: `${k.title}: ${printable(path)}` },
          h("span", { class: `files-mark files-${k.key}`, "aria-label": k.title }, k.mark),
          h("code", {}, printable(path)),
        ),
      ),
    ),
    fc.more ? h("li", { class: "muted files-more", "data-more": String(fc.more) }, `and ${fc.more} more`) : null,
  );
}
