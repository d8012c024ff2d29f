// A workspace's revision history: one row a revision, newest first, with
// its author (a person, an API key, or a step linked to its run), time,
// message and changes; a link to view it, a button to diff it against its
// parent, and for editors a restore behind an in-page confirmation.

import { AUTHOR_ACCOUNT, AUTHOR_KEY, AUTHOR_STEP, call, errorText, type Me, type RestoreRequest, type Revision } from "./api";
import { h, replace, setText } from "./dom";
import { filesCount } from "./files";
import { dateTime, printable } from "./format";
import { runHash, workspaceAPI, workspaceHash } from "./links";

/** revisionLabel is "#N", or "detached rev-..." for a revision off the history. */
export function revisionLabel(r: Revision): string {
  return r.detached || !r.number ? `detached ${r.id}` : `#${r.number}`;
}

/**
 * authorView shows who made r: "you", "person ID", "key ID", or "step ID"
 * with a link to its run (r.run, else what runOf knows of the step).
 */
export function authorView(r: Revision, me: Me, runOf: (step: string) => string | undefined = () => undefined): HTMLElement {
  const a = r.author;
  const el = h("span", { class: "author", "data-author-kind": a.kind, "data-author-id": a.id });
  switch (a.kind) {
    case AUTHOR_ACCOUNT:
      el.append(me.account?.id === a.id ? "you" : `person ${printable(a.id)}`);
      break;
    case AUTHOR_KEY:
      el.append(me.key?.id === a.id ? "this key" : `key ${printable(a.id)}`);
      break;
    case AUTHOR_STEP:
      el.append(`step ${printable(a.id)}`);
      const run = r.run || runOf(r.step || a.id);
      if (run) el.append(" of ", h("a", { href: runHash(run), class: "mono author-run", "data-run-id": run }, run));
      break;
    default:
      el.append(`${printable(a.kind)} ${printable(a.id)}`);
  }
  return el;
}

/** changesText is "+A ~M -R" counting r's changes (the unnamed ones too, as "+N more"). */
export function changesText(r: Revision): string {
  const c = r.changes ?? {};
  const parts = [`+${c.added?.length ?? 0}`, `~${c.modified?.length ?? 0}`, `-${c.removed?.length ?? 0}`];
  if (c.more) parts.push(`+${c.more} more`);
  return filesCount(c) === 0 ? "no changes" : parts.join(" ");
}

export interface HistoryOptions {
  ws: string;
  me: Me;
  /** canWrite says whether the caller may restore (asked at each redraw). */
  canWrite(): boolean;
  /** runOf is the run of a step, when the page knows it. */
  runOf(step: string): string | undefined;
  /** diff shows the diff from one revision to another. */
  diff(from: string, to: string): void;
  /** restored is called with the revision a restore made. */
  restored(r: Revision): void;
}

/** HistoryView is the history card; update redraws it. */
export interface HistoryView {
  el: HTMLElement;
  update(revs: Revision[], shown: string, head: string, more: boolean, runs: number): void;
}

/** historyView builds the history card. */
export function historyView(o: HistoryOptions): HistoryView {
  const tbody = h("tbody");
  const table = h(
    "table",
    { id: "ws-history", "data-testid": "ws-history", class: "grid history" },
    h("thead", {}, h("tr", {}, ["revision", "author", "created", "message", "changes", ""].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const empty = h("p", { class: "muted", id: "ws-history-empty", hidden: true }, "No revisions yet: upload a file or run a step.");
  const more = h("p", { class: "muted", id: "ws-history-more", hidden: true }, "Older revisions are not shown.");
  const question = h("span", { id: "ws-restore-question" });
  const yes = h("button", { type: "button", id: "ws-restore-yes", "data-testid": "ws-restore-yes", class: "danger" }, "Restore");
  const no = h("button", { type: "button", id: "ws-restore-no", "data-testid": "ws-restore-no" }, "Keep the head");
  const restoreError = h("p", { id: "ws-restore-error", "data-testid": "ws-restore-error", class: "error", role: "alert" });
  const confirm = h("div", { id: "ws-restore-confirm", "data-testid": "ws-restore-confirm", class: "confirm row", hidden: true, role: "alertdialog" }, question, h("span", { class: "spacer" }), no, yes);
  let pending: Revision | undefined;
  let busy = false;

  const ask = (r: Revision) => {
    pending = r;
    setText(restoreError, "");
    setText(question, `Restore ${revisionLabel(r)} (${r.id})? Its files become a new revision at the head; nothing is deleted from the history.`);
    confirm.hidden = false;
    confirm.dataset.rev = r.id;
    yes.focus();
  };
  no.addEventListener("click", () => {
    pending = undefined;
    confirm.hidden = true;
  });
  yes.addEventListener("click", async () => {
    if (!pending || busy) return;
    busy = true;
    yes.disabled = true;
    const body: RestoreRequest = { rev: pending.id };
    try {
      const r = await call<Revision>("POST", workspaceAPI(o.ws, "restore"), body);
      confirm.hidden = true;
      pending = undefined;
      o.restored(r);
    } catch (err) {
      setText(restoreError, `restore failed: ${errorText(err)}`);
    } finally {
      busy = false;
      yes.disabled = false;
    }
  });

  const row = (r: Revision, shown: string, head: string): HTMLElement => {
    const actions = h("td", { class: "actions" });
    if (r.parent) {
      const b = h("button", { type: "button", class: "small", "data-action": "diff", title: `what ${revisionLabel(r)} changed` }, "diff");
      b.addEventListener("click", () => o.diff(r.parent!, r.id));
      actions.append(b);
    }
    if (o.canWrite() && r.id !== head) {
      const b = h("button", { type: "button", class: "small", "data-action": "restore", "data-testid": "ws-restore" }, "restore");
      b.addEventListener("click", () => ask(r));
      actions.append(b);
    }
    return h(
      "tr",
      {
        "data-testid": "revision-row",
        "data-rev": r.id,
        "data-number": String(r.number),
        "data-author-kind": r.author.kind,
        class: r.id === shown ? "current" : null,
        "aria-current": r.id === shown ? "true" : null,
      },
      h("td", {}, h("a", { href: workspaceHash(o.ws, r.id), class: "mono", title: r.id }, revisionLabel(r)), r.id === head ? h("span", { class: "badge" }, "head") : null),
      h("td", {}, authorView(r, o.me, o.runOf)),
      h("td", { title: r.created_at }, dateTime(r.created_at)),
      h("td", { class: "message" }, printable(r.message ?? "")),
      h("td", { class: "changes", title: [...(r.changes?.added ?? []), ...(r.changes?.modified ?? []), ...(r.changes?.removed ?? [])].map(printable).join("\n") }, changesText(r)),
      actions,
    );
  };

  const el = h("div", { class: "card", id: "ws-history-card" }, h("h2", {}, "History"), confirm, restoreError, h("div", { class: "scroll-x" }, table), empty, more);
  return {
    el,
    update(revs, shown, head, hasMore, runs) {
      // runs: how many steps' runs are known (a new one may add links).
      const key = JSON.stringify([revs.map((r) => r.id), shown, head, hasMore, runs, o.canWrite()]);
      if (table.dataset.key === key) return;
      table.dataset.key = key;
      replace(tbody, revs.map((r) => row(r, shown, head)));
      empty.hidden = revs.length > 0;
      more.hidden = !hasMore;
    },
  };
}
