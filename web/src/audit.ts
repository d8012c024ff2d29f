// The audit log view of the settings (#/settings/audit, admins and
// owners): GET /v1/audit a page at a time, filtered by who, action and
// time, with next and previous pages (the cursors of the pages read so far
// are kept for "previous").

import { type AuditDocument, type AuditEntry, callPage, errorText, type Me } from "./api";
import { loadNames, whoText } from "./controls";
import { h, replace, setText } from "./dom";
import { dateTime } from "./format";
import type { Page } from "./page";

/** pageSize is how many entries a page asks for. */
const pageSize = 50;

/** Filter is what the form asks for; empty fields match everything. */
interface Filter {
  who: string;
  action: string;
  /** since and until are RFC 3339 times. */
  since: string;
  until: string;
}

/** auditQuery is the query string of one page of the audit log. */
export function auditQuery(f: Filter, cursor: string): string {
  const q = new URLSearchParams({ limit: String(pageSize) });
  if (f.who) q.set("who", f.who);
  if (f.action) q.set("action", f.action);
  if (f.since) q.set("since", f.since);
  if (f.until) q.set("until", f.until);
  if (cursor) q.set("cursor", cursor);
  return q.toString();
}

/**
 * matches checks an entry against the filter on the page as well: the
 * gateway filters, and a gateway without a filter shows a page that is
 * only shorter, never wrong. An action matches exactly, as the gateway's
 * filter does.
 */
function matches(e: AuditEntry, doc: AuditDocument, f: Filter): boolean {
  if (f.who && doc.who !== f.who) return false;
  if (f.action && doc.action !== f.action) return false;
  const t = Date.parse(e.time);
  if (f.since && t < Date.parse(f.since)) return false;
  if (f.until && t >= Date.parse(f.until)) return false;
  return true;
}

/** isoTime turns a datetime-local value (the person's local time) into RFC 3339; "" stays "". */
function isoTime(local: string): string {
  if (!local) return "";
  const d = new Date(local);
  return isNaN(d.getTime()) ? "" : d.toISOString();
}

/** auditView shows the caller's account's audit log. */
export function auditView(root: HTMLElement, me: Me): Page {
  let disposed = false;
  let names = new Map<string, string>();
  let filter: Filter = { who: "", action: "", since: "", until: "" };
  // cursors[i] is the cursor of page i ("" for the first); next is page i+1's.
  let cursors: string[] = [""];
  let next = "";
  let generation = 0;

  const whoList = h("datalist", { id: "audit-who-names" });
  const who = h("input", { id: "audit-who", "data-testid": "audit-who", type: "text", list: "audit-who-names", autocomplete: "off", spellcheck: "false", placeholder: "member or key id" });
  const action = h("input", { id: "audit-action", "data-testid": "audit-action", type: "text", autocomplete: "off", spellcheck: "false", placeholder: "key.create, or key. for all" });
  const since = h("input", { id: "audit-since", "data-testid": "audit-since", type: "datetime-local", step: 1 });
  const until = h("input", { id: "audit-until", "data-testid": "audit-until", type: "datetime-local", step: 1 });
  const apply = h("button", { id: "audit-apply", "data-testid": "audit-apply", type: "submit", class: "primary" }, "Filter");
  const clear = h("button", { id: "audit-clear", "data-testid": "audit-clear", type: "button" }, "Clear");
  const form = h(
    "form",
    { id: "audit-filter", class: "row" },
    h("label", { class: "field" }, "Who", who, whoList),
    h("label", { class: "field" }, "Action", action),
    h("label", { class: "field" }, "Since", since),
    h("label", { class: "field" }, "Until", until),
    h("span", { class: "spacer" }),
    clear,
    apply,
  );
  const error = h("p", { id: "audit-error", "data-testid": "audit-error", class: "error", role: "alert" });
  const tbody = h("tbody");
  const table = h(
    "table",
    { id: "audit-table", "data-testid": "audit-table", class: "grid" },
    h("thead", {}, h("tr", {}, ["#", "time", "who", "action", "target", "result", "client"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const empty = h("p", { id: "audit-empty", class: "muted", hidden: true }, "No entries on this page.");
  const prev = h("button", { id: "audit-prev", "data-testid": "audit-prev", type: "button", disabled: true }, "\u2190 Previous");
  const more = h("button", { id: "audit-next", "data-testid": "audit-next", type: "button", disabled: true }, "Next \u2192");
  const pageLabel = h("span", { id: "audit-page", "data-testid": "audit-page", class: "muted" });
  root.appendChild(
    h(
      "div",
      { class: "card" },
      h("h2", {}, "Audit log"),
      form,
      error,
      h("div", { class: "scroll-x" }, table),
      empty,
      h("div", { class: "row" }, pageLabel, h("span", { class: "spacer" }), prev, more),
    ),
  );

  function row(e: AuditEntry, doc: AuditDocument): HTMLTableRowElement {
    const target = [doc.target, doc.workspace, doc.path, doc.revision].filter(Boolean).join(" ");
    const ok = doc.result === "ok";
    return h(
      "tr",
      { "data-testid": "audit-row", "data-seq": e.seq, "data-who": doc.who ?? "", "data-action": doc.action ?? "", "data-result": doc.result ?? "" },
      h("td", { class: "num" }, String(e.seq)),
      h("td", { title: e.time }, dateTime(e.time)),
      h("td", { title: doc.who ?? "" }, whoText(me, doc.who ?? "", names), doc.role ? h("span", { class: "muted" }, ` (${doc.role})`) : null),
      h("td", { class: "mono" }, doc.action ?? ""),
      h("td", { class: "mono" }, target),
      h("td", {}, h("span", { class: `state ${ok ? "state-succeeded" : "state-failed"}` }, doc.result ?? "")),
      h("td", { class: "muted" }, doc.client ?? ""),
    );
  }

  async function show(page: number): Promise<void> {
    const mine = ++generation;
    setText(error, "");
    prev.disabled = more.disabled = true;
    try {
      const { items, next: n } = await callPage<AuditEntry>("/v1/audit?" + auditQuery(filter, cursors[page] ?? ""));
      if (disposed || mine !== generation) return;
      const rows = items
        .map((e) => ({ e, doc: (e.entry ?? {}) as AuditDocument }))
        .filter(({ e, doc }) => matches(e, doc, filter))
        .map(({ e, doc }) => row(e, doc));
      replace(tbody, rows);
      empty.hidden = rows.length > 0;
      cursors = cursors.slice(0, page + 1);
      next = n;
      prev.disabled = page === 0;
      more.disabled = !next;
      setText(pageLabel, `page ${page + 1}`);
      pageLabel.dataset.page = String(page + 1);
    } catch (err) {
      if (!disposed && mine === generation) {
        setText(error, errorText(err));
        prev.disabled = page === 0;
      }
    }
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    filter = { who: who.value.trim(), action: action.value.trim(), since: isoTime(since.value), until: isoTime(until.value) };
    cursors = [""];
    void show(0);
  });
  clear.addEventListener("click", () => {
    who.value = action.value = since.value = until.value = "";
    filter = { who: "", action: "", since: "", until: "" };
    cursors = [""];
    void show(0);
  });
  more.addEventListener("click", () => {
    if (!next) return;
    cursors.push(next);
    void show(cursors.length - 1);
  });
  prev.addEventListener("click", () => {
    if (cursors.length > 1) void show(cursors.length - 2);
  });

  void (async () => {
    names = await loadNames(me);
    if (disposed) return;
    replace(whoList, [...names].map(([id, label]) => h("option", { value: id }, label)));
    await show(0);
  })();
  return {
    dispose() {
      disposed = true;
    },
  };
}
