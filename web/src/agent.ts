// The run page's parts for an agent run (SPEC.md, "Agents, grants, tools
// and gates"): the agent file the run was made from and what its grant
// holds, the run's refusal count, each tool call (its tool, input,
// summary, state, and a refusal's message with the path it probably
// meant), the proposal a gated run waits on with its diff and, for an
// editor signed in, Approve and Reject, and the run's events, paged.

import {
  call,
  callPage,
  errorText,
  type ApproveRequest,
  type Me,
  type Operation,
  PROPOSAL_PROPOSED,
  type Proposal,
  type Refusal,
  type RunEvent,
  type RunStep,
  STEP_REFUSED,
} from "./api";
import { diffText } from "./diff";
import { h, replace, setText } from "./dom";
import { clock, dateTime, printable } from "./format";
import { runAPI, workspaceHash } from "./links";
import { canWrite } from "./workspace";

/** canApprove says whether the caller may approve or reject a proposal: a person (not a key) with editor or more. */
export function canApprove(me: Me): boolean {
  return !!me.account && canWrite(me);
}

/** refusalsText is "1 refused call" or "N refused calls". */
export function refusalsText(n: number): string {
  return `${n} refused call${n === 1 ? "" : "s"}`;
}

/** workspacePathOf is the path inside the workspace a tool path names ("" for one outside it, /library/... among them). */
export function workspacePathOf(p: string): string {
  if (p.startsWith("/workspace/")) return p.slice("/workspace/".length);
  if (p.startsWith("/")) return "";
  return p;
}

// --- the agent and its grant ---------------------------------------------

/** AgentView is the agent card, the gate card and the run's events. */
export interface AgentView {
  /** head goes into the run's head card: the refusal count. */
  head: HTMLElement;
  /** el is the agent and gate cards, above the steps. */
  el: HTMLElement;
  /** events is the run events card, below the steps. */
  events: HTMLElement;
  update(op: Operation): void;
  dispose(): void;
}

/**
 * agentView builds the agent parts of run runId's page for me; changed is
 * called after an approval or a rejection (the run moves on: read it).
 */
export function agentView(me: Me, runId: string, changed: () => void): AgentView {

  const refusals = h("span", { id: "run-refusals", "data-testid": "run-refusals", class: "refusals", "data-count": "0" });
  const head = h("p", { class: "run-refusals" }, refusals);
  const name = h("dd", { id: "agent-name" });
  const tools = h("dd", { id: "agent-tools", "data-testid": "agent-tools" });
  const gates = h("dd", { id: "agent-gates", "data-testid": "agent-gates" });
  const network = h("dd", { id: "agent-network" });
  const image = h("dd", { id: "agent-image" });
  const limits = h("dd", { id: "agent-limits" });
  const expires = h("dd", { id: "agent-expires" });
  const secrets = h("dd", { id: "agent-secrets" });
  const agentCard = h(
    "div",
    { class: "card agent", id: "agent", "data-testid": "agent" },
    h("h2", {}, "Agent"),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "agent"),
      name,
      h("dt", {}, "tools"),
      tools,
      h("dt", {}, "gates"),
      gates,
      h("dt", {}, "network"),
      network,
      h("dt", {}, "image"),
      image,
      h("dt", {}, "secrets"),
      secrets,
      h("dt", {}, "limits"),
      limits,
      h("dt", {}, "grant expires"),
      expires,
    ),
  );

  const gate = gateView(me, runId, changed);
  const events = eventsView(runId);

  function update(op: Operation): void {
    const a = op.agent;
    if (!a) return;
    const n = op.refusals ?? 0;
    refusals.dataset.count = String(n);
    setText(refusals, refusalsText(n));
    refusals.classList.toggle("some", n > 0);
    const href = workspaceHash(op.workspace, a.revision, a.path);
    if (name.dataset.href !== href) {
      name.dataset.href = href;
      replace(
        name,
        h("a", { href, id: "agent-link", "data-testid": "agent-link", title: `${a.path} at ${a.revision} (sha256 ${a.sha256})` }, a.name),
        " ",
        h("span", { class: "muted" }, `${printable(a.path)} at ${a.revision}`),
      );
    }
    const gated = new Set(a.gates ?? []);
    const toolsKey = JSON.stringify([a.tools, a.gates]);
    if (tools.dataset.key !== toolsKey) {
      tools.dataset.key = toolsKey;
      replace(
        tools,
        (a.tools ?? []).map((t) => h("span", { class: gated.has(t) ? "tool gated" : "tool", "data-tool": t, title: gated.has(t) ? "gated: held only by the step after a person approves" : null }, t)),
      );
    }
    setText(gates, gated.size === 0 ? "none" : [...gated].join(", "));
    setText(network, a.network);
    setText(image, a.image);
    setText(secrets, (a.secrets ?? []).join(", ") || "none");
    const l = a.limits;
    setText(limits, `cpu ${l.cpu}, memory ${l.memory}, timeout ${l.timeout}, pids ${l.pids}, workspace ${l.workspace}, run ${l.run}`);
    setText(expires, dateTime(a.grant_expires));
    expires.title = a.grant_expires;
    gate.update(op);
    events.update(op);
  }

  return {
    head,
    el: h("div", { class: "agent-parts" }, agentCard, gate.el),
    events: events.el,
    update,
    dispose() {
      events.dispose();
    },
  };
}

// --- the gate --------------------------------------------------------------

interface GateView {
  el: HTMLElement;
  update(op: Operation): void;
}

/** proposalBody shows a proposal: its message, its files and its diff. */
export function proposalBody(p: Proposal, prefix: string): HTMLElement {
  return h(
    "div",
    { class: "proposal", id: `${prefix}-body`, "data-proposal": p.id, "data-state": p.state },
    p.message ? h("p", { class: "proposal-message", id: `${prefix}-message` }, printable(p.message)) : null,
    h(
      "ul",
      { class: "files", id: `${prefix}-files`, "aria-label": "files the proposal changes" },
      (p.files ?? []).map((f) =>
        h(
          "li",
          { "data-path": f.path, "data-change": f.delete ? "removed" : "changed" },
          h("span", { class: f.delete ? "files-mark files-removed" : "files-mark files-modified" }, f.delete ? "\u2212" : "~"),
          h("code", {}, printable(f.path)),
        ),
      ),
    ),
    h("div", { id: `${prefix}-diff`, "data-testid": `${prefix}-diff` }, diffText(p.diff)),
  );
}

function gateView(me: Me, runId: string, changed: () => void): GateView {
  const approver = canApprove(me);
  let shown: Proposal | undefined;
  let busy = false;

  const title = h("h2", {}, "Waiting for approval");
  const facts = h("p", { class: "muted", id: "gate-facts" });
  const body = h("div", { id: "gate-proposal" });
  const approve = h("button", { type: "button", id: "gate-approve", "data-testid": "gate-approve", class: "primary" }, "Approve");
  const reject = h("button", { type: "button", id: "gate-reject", "data-testid": "gate-reject", class: "danger" }, "Reject");
  const reason = h("input", { type: "text", id: "gate-reason", "data-testid": "gate-reason", placeholder: "why (for a reject)", "aria-label": "reason for a reject", class: "grow" });
  const status = h("p", { id: "gate-status", "data-testid": "gate-status", class: "muted", "aria-live": "polite" });
  const error = h("p", { id: "gate-error", "data-testid": "gate-error", class: "error", role: "alert" });
  const actions = approver
    ? h("div", { class: "row", id: "gate-actions" }, approve, reject, reason)
    : h("p", { class: "muted", id: "gate-viewer" }, `You read this run as ${me.account ? me.role : "an API key"}: an editor signed in approves or rejects the change.`);
  const el = h("div", { class: "card gate", id: "gate", "data-testid": "gate", hidden: true }, title, facts, body, actions, status, error);

  async function decide(verb: "approve" | "reject"): Promise<void> {
    if (!shown || busy) return;
    busy = true;
    approve.disabled = reject.disabled = true;
    setText(error, "");
    const p = shown;
    const req: ApproveRequest = { proposal: p.id };
    if (verb === "reject" && reason.value.trim()) req.reason = reason.value.trim();
    try {
      await call<unknown>("POST", runAPI(runId, verb), req);
      setText(status, verb === "approve" ? `approved ${p.id}: the run's next step may apply it` : `rejected ${p.id}`);
      status.dataset.decided = verb;
      changed();
    } catch (err) {
      setText(error, `${verb} failed: ${errorText(err)}`);
    } finally {
      busy = false;
      approve.disabled = reject.disabled = shown?.state !== PROPOSAL_PROPOSED;
    }
  }
  approve.addEventListener("click", () => void decide("approve"));
  reject.addEventListener("click", () => void decide("reject"));

  return {
    el,
    update(op) {
      const p = op.awaiting ?? undefined;
      el.hidden = !p;
      if (!p) {
        shown = undefined;
        return;
      }
      const key = `${p.id}|${p.state}|${p.sha256}`;
      if (el.dataset.key === key) return;
      el.dataset.key = key;
      el.dataset.proposal = p.id;
      shown = p;
      setText(facts, `${p.id} from step ${p.step}, against ${p.base}, sha256 ${p.sha256.slice(0, 12)} \u00b7 ${p.state}`);
      replace(body, proposalBody(p, "gate"));
      if (!busy) approve.disabled = reject.disabled = p.state !== PROPOSAL_PROPOSED;
    },
  };
}

// --- tool calls --------------------------------------------------------------

/**
 * refusalMessage is r's message without the "; did you mean X?" the
 * gateway ends it with when it names did_you_mean, which the page shows
 * on a line of its own, linked.
 */
export function refusalMessage(r: Refusal): string {
  const tail = r.did_you_mean ? `; did you mean ${r.did_you_mean}?` : "";
  return tail && r.message.endsWith(tail) ? r.message.slice(0, -tail.length) : r.message;
}

/** ToolDetails is what a step shows of its tool call. */
export interface ToolDetails {
  el: HTMLElement;
  update(s: RunStep, ws: string): void;
}

/** toolDetails shows step s's tool call: tool, input, summary, refusal, proposal. */
export function toolDetails(runId: string, index: number): ToolDetails {
  const input = h("code", { class: "tool-input", id: `tool-input-${index}`, "data-testid": `tool-input-${index}` });
  const summary = h("p", { class: "tool-summary", id: `tool-summary-${index}`, "data-testid": `tool-summary-${index}` });
  const refusal = h("div", { class: "refusal", id: `refusal-${index}`, "data-testid": `refusal-${index}`, role: "note", hidden: true });
  const proposalRow = h("div", { class: "row", id: `tool-proposal-${index}`, hidden: true });
  const proposal = h("div", { id: `proposal-${index}`, "data-testid": `proposal-${index}`, hidden: true });
  const el = h("div", { class: "tool-call", id: `tool-${index}`, "data-testid": `tool-${index}` }, h("p", { class: "tool-line" }, input), summary, refusal, proposalRow, proposal);
  let proposalId = "";

  async function showProposal(): Promise<void> {
    if (!proposal.hidden) {
      proposal.hidden = true;
      return;
    }
    try {
      const p = await call<Proposal>("GET", runAPI(runId, `proposals/${encodeURIComponent(proposalId)}`));
      replace(proposal, h("p", { class: "muted" }, `${p.id} \u00b7 ${p.state}`), proposalBody(p, `proposal-${index}`));
    } catch (err) {
      replace(proposal, h("p", { class: "error" }, errorText(err)));
    }
    proposal.hidden = false;
  }

  return {
    el,
    update(s, ws) {
      const t = s.tool;
      if (!t) return;
      setText(input, printable(t.input ?? ""));
      input.hidden = !t.input;
      input.title = `input sha256 ${t.input_sha256}`;
      setText(summary, printable(t.summary ?? ""));
      summary.hidden = !t.summary;
      const r = t.refusal ?? undefined;
      el.dataset.refusals = String(s.state === STEP_REFUSED || r ? 1 : 0);
      refusal.hidden = !r;
      const rkey = r ? JSON.stringify(r) : "";
      if (r && refusal.dataset.key !== rkey) {
        refusal.dataset.key = rkey;
        refusal.dataset.reason = r.reason;
        if (r.path) refusal.dataset.path = r.path;
        if (r.did_you_mean) refusal.dataset.didYouMean = r.did_you_mean;
        const meant = r.did_you_mean ? workspacePathOf(r.did_you_mean) : "";
        replace(
          refusal,
          h("p", { class: "refusal-message" }, h("strong", {}, `refused (${r.reason.replace(/_/g, " ")}): `), printable(refusalMessage(r))),
          r.did_you_mean
            ? h(
                "p",
                { class: "did-you-mean", id: `did-you-mean-${index}`, "data-testid": `did-you-mean-${index}` },
                "did you mean ",
                meant ? h("a", { href: workspaceHash(ws, t.read ?? "", meant) }, h("code", {}, printable(r.did_you_mean))) : h("code", {}, printable(r.did_you_mean)),
                "?",
              )
            : null,
        );
      }
      if (t.proposal && t.proposal !== proposalId) {
        proposalId = t.proposal;
        const b = h("button", { type: "button", class: "small", id: `show-proposal-${index}`, "data-action": "proposal" }, `proposal ${t.proposal}`);
        b.addEventListener("click", () => void showProposal());
        replace(proposalRow, b);
      }
      proposalRow.hidden = !t.proposal;
    },
  };
}

// --- the run's events --------------------------------------------------------

/** eventsPage is how many run events one read asks for. */
const eventsPage = 100;
/** rereadAfter is when the events are read again after the run changed. */
const rereadAfter = 2000;

interface EventsView {
  el: HTMLElement;
  update(op: Operation): void;
  dispose(): void;
}

/** eventText is what one run event says, from its fields. */
export function eventText(e: RunEvent): string {
  const parts: string[] = [];
  if (e.tool) parts.push(e.tool);
  if (e.summary) parts.push(printable(e.summary));
  if (e.refusal) parts.push(`${e.refusal.reason}: ${printable(e.refusal.message)}`);
  if (e.proposal) parts.push(e.proposal);
  if (e.by) parts.push(`by ${e.by.kind} ${printable(e.by.id)}`);
  if (e.revision) parts.push(`${e.parent ? e.parent + " \u2192 " : ""}${e.revision}${e.changes ? ` (${e.changes.length} path${e.changes.length === 1 ? "" : "s"})` : ""}`);
  if (e.state) parts.push(e.state);
  if (typeof e.exit_code === "number") parts.push(`exit code ${e.exit_code}`);
  return parts.join(" \u00b7 ");
}

/**
 * eventsView lists GET /v1/runs/{id}/events, oldest first, a page at a
 * time ("more" reads the next). While the run changes and every page was
 * read, the list is read again from its start, so new events appear.
 */
function eventsView(runId: string): EventsView {
  const list = h("ol", { id: "run-events", "data-testid": "run-events", class: "events run-events" });
  const empty = h("p", { class: "muted", id: "run-events-empty" }, "No run events yet.");
  const more = h("button", { type: "button", id: "run-events-more", "data-testid": "run-events-more", hidden: true }, "more");
  const error = h("p", { id: "run-events-error", class: "error", role: "alert" });
  const el = h("div", { class: "card", id: "run-events-card" }, h("h2", {}, "Run events"), empty, list, more, error);
  let events: RunEvent[] = [];
  let next = "";
  let key = "";
  let disposed = false;
  let again: number | undefined;
  // running serialises the reads: a page of "more" and a re-read never interleave.
  let running: Promise<void> = Promise.resolve();

  const path = (cursor: string) => runAPI(runId, `events?limit=${eventsPage}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);

  function render(): void {
    replace(
      list,
      events.map((e) =>
        h(
          "li",
          {
            "data-testid": "run-event",
            "data-seq": String(e.seq),
            "data-kind": e.kind,
            "data-step": typeof e.step_index === "number" ? String(e.step_index) : null,
            "data-tool": e.tool ?? null,
            "data-reason": e.refusal?.reason ?? null,
          },
          h("time", { datetime: e.time, title: e.time }, clock(e.time)),
          h("span", { class: "event-step" }, typeof e.step_index === "number" ? `step ${e.step_index}` : `#${e.seq}`),
          h("span", { class: "event-kind" }, printable(e.kind.replace(/_/g, " "))),
          h("span", { class: "event-message" }, eventText(e)),
        ),
      ),
    );
    empty.hidden = events.length > 0;
    more.hidden = next === "";
  }

  async function readMore(): Promise<void> {
    try {
      const page = await callPage<RunEvent>(path(next));
      if (disposed) return;
      const seen = new Set(events.map((e) => e.seq));
      events = [...events, ...page.items.filter((e) => !seen.has(e.seq))];
      next = page.next;
      setText(error, "");
      render();
    } catch (err) {
      if (!disposed) setText(error, errorText(err));
    }
  }

  // reread reads the list again from its start, as far as it was shown.
  async function reread(): Promise<void> {
    const want = Math.max(events.length, eventsPage);
    const out: RunEvent[] = [];
    let cursor = "";
    try {
      for (;;) {
        const page = await callPage<RunEvent>(path(cursor));
        if (disposed) return;
        out.push(...page.items);
        cursor = page.next;
        if (!cursor || out.length >= want) break;
      }
      events = out;
      next = cursor;
      setText(error, "");
      render();
    } catch (err) {
      if (!disposed) setText(error, errorText(err));
    }
  }

  more.addEventListener("click", () => {
    running = running.then(readMore);
  });

  return {
    el,
    update(op) {
      // Anything a run event records moves one of these.
      const k = JSON.stringify([op.state, op.steps?.length ?? 0, op.steps?.map((s) => s.state), op.refusals ?? 0, op.awaiting?.state ?? "", op.ended_at ?? ""]);
      if (k === key) return;
      key = k;
      // With pages left unread the person reads on with "more"; a re-read
      // would only repeat what is shown. The gateway writes a change's
      // events just after the change: read once more a little later.
      if (next !== "") return;
      running = running.then(reread);
      if (again !== undefined) window.clearTimeout(again);
      again = window.setTimeout(() => {
        again = undefined;
        if (next === "") running = running.then(reread);
      }, rereadAfter);
    },
    dispose() {
      disposed = true;
      if (again !== undefined) window.clearTimeout(again);
    },
  };
}
