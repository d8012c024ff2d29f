// The diff between two revisions of a workspace (GET diff?from=&to=):
// the paths added, modified and removed, and the gateway's unified diff of
// each text file, one line an element, coloured by its first character.

import { call, errorText, type Revision, type WorkspaceDiff } from "./api";
import { h, replace, setText } from "./dom";
import { renderFiles } from "./files";
import { printable } from "./format";
import { revisionLabel } from "./history";
import { workspaceAPI } from "./links";

/** lineClass is the class of one line of a unified diff. */
export function lineClass(line: string): string {
  if (line.startsWith("+++") || line.startsWith("---")) return "diff-file";
  if (line.startsWith("@@")) return "diff-hunk";
  if (line.startsWith("+")) return "diff-add";
  if (line.startsWith("-")) return "diff-del";
  return "diff-ctx";
}

/** diffText shows a unified diff, one line an element coloured by lineClass. */
export function diffText(diff: string): HTMLElement {
  return h("pre", { class: "diff" }, diff.replace(/\n$/, "").split("\n").map((l) => h("span", { class: lineClass(l) }, l + "\n")));
}

/** DiffView is the diff card: two revision choosers and the result. */
export interface DiffView {
  el: HTMLElement;
  /** revisions fills the choosers (newest first). */
  revisions(revs: Revision[]): void;
  /** show reads and shows the diff from one revision to another. */
  show(from: string, to: string): Promise<void>;
}

export function diffView(ws: string): DiffView {
  const from = h("select", { id: "ws-diff-from", "data-testid": "ws-diff-from", "aria-label": "from revision" });
  const to = h("select", { id: "ws-diff-to", "data-testid": "ws-diff-to", "aria-label": "to revision" });
  const button = h("button", { type: "button", id: "ws-diff-show", "data-testid": "ws-diff-show" }, "Compare");
  const error = h("p", { id: "ws-diff-error", class: "error", role: "alert" });
  const changes = h("ul", { id: "ws-diff-changes", "data-testid": "ws-diff-changes", class: "files", hidden: true, "aria-label": "paths changed" });
  const texts = h("div", { id: "ws-diff-text" });
  const result = h("div", { id: "ws-diff", "data-testid": "ws-diff", hidden: true }, changes, texts);
  const el = h(
    "div",
    { class: "card", id: "ws-diff-card" },
    h("div", { class: "row" }, h("h2", {}, "Compare"), h("span", { class: "spacer" }), from, h("span", { class: "muted" }, "\u2192"), to, button),
    error,
    result,
  );
  let generation = 0;

  const show = async (a: string, b: string): Promise<void> => {
    const mine = ++generation;
    setText(error, "");
    for (const [sel, v] of [[from, a], [to, b]] as const) {
      if (![...sel.options].some((o) => o.value === v)) sel.append(h("option", { value: v }, v));
      sel.value = v;
    }
    try {
      const d = await call<WorkspaceDiff>("GET", workspaceAPI(ws, `diff?from=${encodeURIComponent(a)}&to=${encodeURIComponent(b)}`));
      if (mine !== generation) return;
      result.hidden = false;
      result.dataset.from = d.from;
      result.dataset.to = d.to;
      renderFiles(changes, d.changes);
      replace(
        texts,
        (d.text ?? []).map((f) =>
          h(
            "div",
            { class: "file-diff", "data-testid": "file-diff", "data-path": f.path },
            h("h3", { class: "mono" }, printable(f.path)),
            diffText(f.diff),
            f.truncated ? h("p", { class: "muted" }, "The diff is cut at its limit.") : null,
          ),
        ),
      );
      el.scrollIntoView({ block: "nearest" });
    } catch (err) {
      if (mine === generation) setText(error, errorText(err));
    }
  };
  button.addEventListener("click", () => {
    if (from.value && to.value) void show(from.value, to.value);
  });

  return {
    el,
    revisions(revs) {
      const key = revs.map((r) => r.id).join(",");
      if (from.dataset.key === key) return;
      from.dataset.key = key;
      for (const sel of [from, to]) {
        const keep = sel.value;
        replace(sel, revs.map((r) => h("option", { value: r.id }, `${revisionLabel(r)} ${r.id}`)));
        if (revs.some((r) => r.id === keep)) sel.value = keep;
      }
      if (!from.dataset.chosen && revs.length > 1) {
        to.value = revs[0].id;
        from.value = revs[1].id;
      }
    },
    show(a, b) {
      from.dataset.chosen = "true";
      return show(a, b);
    },
  };
}
