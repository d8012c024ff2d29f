// The run page: run state and cancel, the phase times of each step, one
// terminal per step fed by its stream, denied egress, the files each step
// changed (and the run's union of them), and the events. An agent run's
// page adds its agent, grant, refusals, tool calls and gate (agent.ts).

import { ApiError, call, errorText, type Me, type Operation, PHASES, type RunStep, runEnded, stepEnded, type StepEvent, TOOL_BASH } from "./api";
import { type AgentView, agentView, type ToolDetails, toolDetails } from "./agent";
import { cancelProgress, cancelSettled, cancelStatus } from "./cancel";
import { h, replace, setText } from "./dom";
import { renderFiles } from "./files";
import { clock, dateTime, printable, since } from "./format";
import { runAPI, workspaceHash } from "./links";
import type { Page } from "./page";
import { type ExitData, type Frame, StepStream, type StreamState } from "./stream";
import { StepTerminal } from "./terminal";
import { isTTY } from "./tty";

const pollEvery = 1500;
const pollMaxDelay = 10_000;
// After a run ends, keep reading it this long for late phases (cleaned_up)
// and a cancel confirmation.
const pollAfterEnd = 120_000;

let shown: Map<number, StepTerminal> | undefined;

/** terminalText returns the text of step index's terminal on the run page shown ("" when none). */
export function terminalText(index: number): string {
  return shown?.get(index)?.text() ?? "";
}

interface StepView {
  step: RunStep;
  root: HTMLElement;
  /** tool is the tool call of a Bash step of an agent run. */
  tool?: ToolDetails;
  state: HTMLElement;
  exit: HTMLElement;
  denied: HTMLElement;
  files: HTMLElement;
  revision: HTMLAnchorElement;
  streamStatus: HTMLElement;
  terminal: StepTerminal;
  stream?: StepStream;
  exitSeen: boolean;
  // pendingInput holds keystrokes typed while the stream reconnects; they
  // are sent, in order, as soon as it is open again.
  pendingInput: string[];
}

// At most this many keystroke chunks wait for a reconnect; more are dropped.
const maxPendingInput = 4096;

/** ToolStepView is a step of an agent run that is a file tool's call (no sandbox, no stream). */
interface ToolStepView {
  step: RunStep;
  state: HTMLElement;
  revision: HTMLAnchorElement;
  tool: ToolDetails;
}

/** isFileToolStep: a tool call the gateway answered itself, with nothing to stream. */
function isFileToolStep(s: RunStep): boolean {
  return !!s.tool && s.tool.name !== TOOL_BASH;
}

interface TimelineEntry {
  key: string;
  at: number;
  time: string;
  step: number;
  event: StepEvent;
}

/**
 * eventData is the typed payload of e as data attributes of its timeline
 * item (data-reason, data-packets, data-cause, data-files, ...), for
 * styling and for tests: the page reads payloads, never messages.
 */
function eventData(e: StepEvent): Record<string, string> {
  const d: Record<string, string> = {};
  if (e.egress) {
    d["data-reason"] = e.egress.reason;
    d["data-packets"] = String(e.egress.packets);
  }
  if (e.exit) {
    d["data-state"] = e.exit.state;
    if (e.exit.cause) d["data-cause"] = e.exit.cause;
  }
  if (e.files) d["data-files"] = String((e.files.added?.length ?? 0) + (e.files.modified?.length ?? 0) + (e.files.removed?.length ?? 0) + (e.files.more ?? 0));
  if (e.output?.dropped_bytes) d["data-dropped"] = String(e.output.dropped_bytes);
  if (e.waiting) d["data-reason"] = e.waiting.reason;
  if (e.unplaceable) d["data-reason"] = e.unplaceable.resource;
  if (e.warning) d["data-cause"] = e.warning.cause;
  return d;
}

/** runPage shows run runId to me until disposed. */
export function runPage(root: HTMLElement, me: Me, runId: string): Page {
  let op: Operation | undefined;
  let disposed = false;
  let pollTimer: number | undefined;
  let pollFailures = 0;
  // Answers are applied in the order their requests were sent, so a slow
  // older answer never overwrites a newer one.
  let issued = 0;
  let applied = 0;
  let endedAt = 0;
  // cancelAccepted: the server answered this page's cancel with 2xx.
  // Until then the page says only "requesting cancel…".
  let cancelAccepted = false;
  let cancelInFlight = false;
  let resizeTimer: number | undefined;
  const views = new Map<number, StepView>();
  const toolViews = new Map<number, ToolStepView>();
  let agent: AgentView | undefined;
  const terminals = new Map<number, StepTerminal>();
  const timeline = new Map<string, TimelineEntry>();
  shown = terminals;

  const runState = h("span", { id: "run-state", "data-testid": "run-state", class: "state" });
  const workspace = h("dd", { id: "run-workspace" });
  const created = h("dd", { id: "run-created" });
  const ended = h("dd", { id: "run-ended" });
  const createdBy = h("dd", { id: "run-created-by" });
  const cancelButton = h("button", { id: "cancel-button", "data-testid": "cancel-button", type: "button", class: "danger", disabled: true }, "Cancel");
  const cancelStatusEl = h("span", { id: "cancel-status", "data-testid": "cancel-status", "aria-live": "polite" });
  const cancelProgressEl = h("span", { id: "cancel-progress", "data-testid": "cancel-progress", class: "muted", "aria-live": "polite" });
  const cancelError = h("p", { id: "cancel-error", class: "error", role: "alert" });
  const runError = h("p", { id: "run-error", class: "error", role: "alert" });
  const runErrors = h("ul", { id: "run-errors", class: "error-list" });
  const runFiles = h("ul", { id: "run-files", "data-testid": "run-files", class: "files", "aria-label": "files changed by the run" });
  const runFilesRow = h("div", { class: "run-files", hidden: true }, h("span", { class: "muted" }, "files changed"), runFiles);
  const phasesBody = h("tbody");
  const phases = h(
    "table",
    { id: "phases", "data-testid": "phases", class: "grid phases" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "step"), PHASES.map((p) => h("th", { scope: "col" }, p.replace("_", " "))))),
    phasesBody,
  );
  const phasesCard = h("div", { class: "card", id: "phases-card" }, h("h2", {}, "Phases"), h("div", { class: "scroll-x" }, phases));
  const agentSlot = h("div", { id: "agent-slot" });
  const headCard = h(
    "div",
    { class: "card run-head" },
    h("a", { href: "#/runs", class: "back" }, "\u2190 runs"),
    h("h1", {}, "Run ", h("span", { id: "run-id", class: "mono" }, runId), " ", runState),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "workspace"),
      workspace,
      h("dt", {}, "created"),
      created,
      h("dt", {}, "ended"),
      ended,
      h("dt", {}, "by"),
      createdBy,
    ),
    runFilesRow,
    h("div", { class: "row" }, cancelButton, cancelStatusEl, cancelProgressEl),
    cancelError,
    runError,
    runErrors,
  );
  const stepsEl = h("div", { id: "steps" });
  const agentEventsSlot = h("div", { id: "agent-events-slot" });
  const events = h("ol", { id: "events", "data-testid": "events", class: "events" });
  const eventsEmpty = h("p", { class: "muted", id: "events-empty" }, "No events yet.");
  const stepEventsCard = h("div", { class: "card", id: "step-events-card" }, h("h2", {}, "Events"), eventsEmpty, events);

  root.appendChild(
    h(
      "section",
      { class: "run" },
      headCard,
      agentSlot,
      phasesCard,
      stepsEl,
      agentEventsSlot,
      stepEventsCard,
    ),
  );

  // --- steps -------------------------------------------------------------

  function addStep(step: RunStep): StepView {
    const i = step.index;
    const tty = isTTY(step);
    const container = h("div", { class: `step-terminal terminal-step-${i}`, id: `terminal-step-${i}`, "data-testid": `terminal-step-${i}` });
    const state = h("span", { id: `step-state-${i}`, "data-testid": `step-state-${i}`, class: "state" });
    const exit = h("span", { id: `step-exit-${i}`, "data-testid": `step-exit-${i}`, class: "exit" });
    const denied = h("p", { id: `denied-${i}`, "data-testid": `denied-${i}`, class: "denied", hidden: true });
    const files = h("ul", { id: `files-${i}`, "data-testid": `files-${i}`, class: "files", "aria-label": `files changed by step ${i}`, hidden: true });
    const revision = h("a", { id: `step-revision-${i}`, "data-testid": `step-revision-${i}`, class: "revision mono", hidden: true });
    const streamStatus = h("span", { id: `stream-status-${i}`, "data-testid": `stream-status-${i}`, class: "muted stream-status" });
    const stepRoot = h(
      "div",
      { class: "card step", id: `step-${i}`, "data-testid": `step-${i}`, "data-step-id": step.id },
      h(
        "div",
        { class: "row step-head" },
        h("h2", {}, `Step ${i}`),
        step.tool ? h("span", { class: "tool-name", "data-tool": step.tool.name }, step.tool.name) : null,
        h("code", { class: "args", title: step.id }, (step.args ?? []).join(" ")),
        tty ? h("span", { class: "badge" }, "tty") : null,
        state,
        exit,
        revision,
        h("span", { class: "spacer" }),
        streamStatus,
      ),
      denied,
      files,
      container,
    );
    const tool = step.tool ? toolDetails(runId, i) : undefined;
    if (tool) stepRoot.insertBefore(tool.el, denied);
    // The terminal must be in the document before it opens (it measures).
    stepsEl.appendChild(stepRoot);
    // The terminal may report its first size while being built, before
    // view exists and long before a stream does.
    let viewOf = (): StepView | undefined => undefined;
    const input = {
      data: (d: string) => {
        const v = viewOf();
        if (!v || v.exitSeen) return;
        if (v.stream?.send({ type: "stdin", data: d })) return;
        if (v.pendingInput.length < maxPendingInput) v.pendingInput.push(d);
      },
      resize: (cols: number, rows: number) => viewOf()?.stream?.send({ type: "resize", cols, rows }),
    };
    const view: StepView = {
      step,
      root: stepRoot,
      tool,
      state,
      exit,
      denied,
      files,
      revision,
      streamStatus,
      terminal: new StepTerminal(container, tty, tty ? input : undefined),
      exitSeen: false,
      pendingInput: [],
    };
    viewOf = () => view;
    views.set(i, view);
    terminals.set(i, view.terminal);

    const row = h(
      "tr",
      { "data-testid": `phases-step-${i}` },
      h("th", { scope: "row" }, String(i)),
      PHASES.map((p) => h("td", { id: `phase-${i}-${p}`, "data-testid": `phase-${i}-${p}`, class: "phase" })),
    );
    phasesBody.appendChild(row);
    return view;
  }

  // shouldStream: a step that never left the queue has nothing to show yet,
  // and one cancelled before placement never will.
  function shouldStream(s: RunStep): boolean {
    if (s.state === "queued") return false;
    if (stepEnded(s.state) && !s.phases?.placed) return false;
    return true;
  }

  function startStream(view: StepView): void {
    const i = view.step.index;
    view.stream = new StepStream(
      view.step.id,
      {
        frame: (f) => onFrame(view, f),
        state: (s, detail) => onStreamState(view, s, detail),
        open: () => {
          if (!view.terminal.tty) return;
          view.stream?.send({ type: "resize", cols: view.terminal.cols, rows: view.terminal.rows });
          while (view.pendingInput.length > 0 && view.stream?.send({ type: "stdin", data: view.pendingInput[0] })) {
            view.pendingInput.shift();
          }
          if (!view.exitSeen) view.terminal.focus();
        },
      },
      { giveUp: (failures) => failures >= 3 && stepEnded(views.get(i)?.step.state ?? "") },
    );
    view.stream.start();
  }

  function onFrame(view: StepView, f: Frame): void {
    switch (f.kind) {
      case "stdout":
      case "stderr":
        view.terminal.write(f);
        break;
      case "event": {
        const e = (f.data ?? {}) as Partial<StepEvent>;
        addEvent(view.step.index, { ...e, time: e.time || f.time, kind: e.kind || "event", message: e.message ?? "" });
        renderEvents();
        break;
      }
      case "exit": {
        view.exitSeen = true;
        setText(view.exit, exitText((f.data ?? {}) as ExitData));
        view.exit.dataset.final = "true";
        view.terminal.term.options.disableStdin = true;
        view.terminal.term.options.cursorBlink = false;
        // The run record moves on with the exit: read it now.
        pollSoon();
        break;
      }
    }
  }

  function onStreamState(view: StepView, s: StreamState, detail: string): void {
    view.streamStatus.dataset.state = s;
    const text: Record<StreamState, string> = {
      connecting: "connecting\u2026",
      live: "live",
      retrying: "reconnecting\u2026",
      ended: "",
      unavailable: "output unavailable",
      closed: "",
    };
    setText(view.streamStatus, text[s]);
    view.streamStatus.title = detail;
    if (s === "unavailable") view.terminal.note(`[no output stream: ${detail}]`);
  }

  function exitText(x: ExitData): string {
    const parts: string[] = [];
    if (x.state && x.state !== "exited") parts.push(x.state);
    if (typeof x.exit_code === "number") parts.push(`exit code ${x.exit_code}`);
    if (x.terminated_by) parts.push(`terminated by ${x.terminated_by}`);
    if (x.reason) parts.push(x.reason);
    return parts.join(" \u00b7 ");
  }

  function addToolStep(s: RunStep): ToolStepView {
    const i = s.index;
    const state = h("span", { id: `step-state-${i}`, "data-testid": `step-state-${i}`, class: "state" });
    const revision = h("a", { id: `step-revision-${i}`, "data-testid": `step-revision-${i}`, class: "revision mono", hidden: true });
    const tool = toolDetails(runId, i);
    stepsEl.appendChild(
      h(
        "div",
        { class: "card step tool-step", id: `step-${i}`, "data-testid": `step-${i}`, "data-step-id": s.id },
        h("div", { class: "row step-head" }, h("h2", {}, `Step ${i}`), h("span", { class: "tool-name", "data-tool": s.tool?.name ?? "" }, s.tool?.name ?? ""), state, revision),
        tool.el,
      ),
    );
    const view: ToolStepView = { step: s, state, revision, tool };
    toolViews.set(i, view);
    return view;
  }

  function updateToolStep(s: RunStep): void {
    const view = toolViews.get(s.index) ?? addToolStep(s);
    view.step = s;
    setText(view.state, s.state);
    view.state.className = `state state-${s.state}`;
    view.tool.update(s, op?.workspace ?? "");
    showRevision(view.revision, s.index, s.revision);
  }

  function updateStep(s: RunStep): void {
    if (isFileToolStep(s)) {
      updateToolStep(s);
      return;
    }
    const view = views.get(s.index) ?? addStep(s);
    view.step = s;
    view.tool?.update(s, op?.workspace ?? "");
    setText(view.state, s.state);
    view.state.className = `state state-${s.state}`;
    if (!view.exitSeen && stepEnded(s.state)) {
      setText(view.exit, exitText({ state: s.state, exit_code: s.exit_code ?? undefined, terminated_by: s.terminated_by ?? "", reason: s.reason }));
    }
    const denied = Object.entries(s.denied ?? {}).filter(([, n]) => n > 0);
    setText(view.denied, denied.length === 0 ? "" : "denied egress: " + denied.map(([why, n]) => `${why} ${n}`).join(", "));
    view.denied.hidden = denied.length === 0;
    view.denied.dataset.total = String(denied.reduce((a, [, n]) => a + n, 0));
    renderFiles(view.files, s.files_changed);
    showRevision(view.revision, s.index, s.revision);

    for (const p of PHASES) {
      const cell = document.getElementById(`phase-${s.index}-${p}`);
      if (!cell) continue;
      const t = s.phases?.[p];
      if ((cell.dataset.time ?? "") === (t ?? "")) continue;
      if (t) {
        cell.dataset.time = t;
        cell.title = t;
        const delta = p === "queued" ? "" : since(s.phases?.queued, t);
        replace(cell, h("span", { class: "t" }, clock(t)), delta ? h("span", { class: "delta" }, delta) : null);
      } else {
        delete cell.dataset.time;
        cell.title = "";
        replace(cell);
      }
    }
    for (const e of s.events ?? []) addEvent(s.index, e);
    if (!view.stream && shouldStream(s)) startStream(view);
  }

  // showRevision links the step to the revision it made, in the workspace view.
  function showRevision(link: HTMLAnchorElement, index: number, rev: string | undefined): void {
    link.hidden = !rev || !op;
    if (!rev || !op) return;
    const href = workspaceHash(op.workspace, rev);
    if (link.getAttribute("href") === href) return;
    link.setAttribute("href", href);
    link.dataset.rev = rev;
    link.title = `the workspace as step ${index} left it`;
    setText(link, rev);
  }

  // --- events ------------------------------------------------------------

  function addEvent(step: number, e: StepEvent): void {
    const at = Date.parse(e.time);
    const key = `${step}|${e.kind}|${e.message}|${isNaN(at) ? e.time : at}`;
    if (timeline.has(key)) return;
    timeline.set(key, { key, at: isNaN(at) ? 0 : at, time: e.time, step, event: e });
  }

  function renderEvents(): void {
    const entries = [...timeline.values()].sort((a, b) => a.at - b.at || a.step - b.step);
    if (events.childElementCount === entries.length) return;
    replace(
      events,
      entries.map((e) =>
        h(
          "li",
          { "data-testid": "event", "data-kind": e.event.kind, "data-step": String(e.step), ...eventData(e.event) },
          h("time", { datetime: e.time, title: e.time }, clock(e.time)),
          h("span", { class: "event-step" }, `step ${e.step}`),
          h("span", { class: "event-kind" }, printable(e.event.kind)),
          h("span", { class: "event-message" }, printable(e.event.message)),
        ),
      ),
    );
    eventsEmpty.hidden = entries.length > 0;
  }

  // --- run ---------------------------------------------------------------

  function update(next: Operation): void {
    op = next;
    setText(runState, op.state);
    runState.className = `state state-${op.state}`;
    if (workspace.dataset.ws !== op.workspace) {
      workspace.dataset.ws = op.workspace;
      replace(workspace, h("a", { href: workspaceHash(op.workspace), id: "run-workspace-link", "data-testid": "run-workspace-link" }, op.workspace));
    }
    setText(created, dateTime(op.created_at));
    created.title = op.created_at;
    setText(ended, op.ended_at ? dateTime(op.ended_at) : "\u2014");
    setText(createdBy, op.created_by ? `${op.created_by.kind} ${op.created_by.id}` : "");
    replace(runErrors, (op.errors ?? []).map((e) => h("li", {}, e)));
    renderFiles(runFiles, op.files_changed);
    runFilesRow.hidden = runFiles.hidden;
    if (op.agent && !agent) {
      agent = agentView(me, runId, pollSoon);
      headCard.insertBefore(agent.head, runFilesRow);
      agentSlot.appendChild(agent.el);
      agentEventsSlot.appendChild(agent.events);
    }
    agent?.update(op);
    for (const s of [...(op.steps ?? [])].sort((a, b) => a.index - b.index)) updateStep(s);
    // An agent run's file tools have no phases: the table is for script steps.
    // Their sandboxes' events are the script steps' too.
    phasesCard.hidden = stepEventsCard.hidden = !!op.agent && views.size === 0;
    renderEvents();
    if (runEnded(op) && endedAt === 0) endedAt = Date.now();
    renderCancel();
  }

  function renderCancel(): void {
    if (!op) return;
    const status = cancelStatus(op, cancelAccepted);
    setText(cancelStatusEl, status);
    cancelStatusEl.dataset.settled = String(cancelSettled(status));
    setText(cancelProgressEl, cancelProgress(cancelInFlight, status));
    cancelButton.disabled = cancelInFlight || runEnded(op) || status !== "";
  }

  function keepPolling(): boolean {
    if (!op) return true;
    if (!runEnded(op)) return true;
    if (Date.now() - endedAt > pollAfterEnd) return false;
    const status = cancelStatus(op, cancelAccepted);
    if (status !== "" && !cancelSettled(status)) return true;
    return (op.steps ?? []).some((s) => s.phases?.created && !s.phases?.cleaned_up && s.cleanup !== "done");
  }

  function apply(mine: number, next: Operation): void {
    if (mine < applied) return;
    applied = mine;
    update(next);
  }

  async function poll(): Promise<void> {
    pollTimer = undefined;
    const mine = ++issued;
    try {
      const next = await call<Operation>("GET", `/v1/runs/${encodeURIComponent(runId)}`);
      if (disposed) return;
      pollFailures = 0;
      setText(runError, "");
      apply(mine, next);
    } catch (err) {
      if (disposed) return;
      if (err instanceof ApiError && (err.status === 404 || err.status === 403 || err.status === 401)) {
        setText(runError, errorText(err));
        return;
      }
      pollFailures++;
      setText(runError, `${errorText(err)} (retrying)`);
    }
    if (disposed || pollTimer !== undefined) return;
    if (!keepPolling()) return;
    const delay = Math.min(pollMaxDelay, pollEvery * 2 ** pollFailures);
    pollTimer = window.setTimeout(() => void poll(), delay);
  }

  function pollSoon(): void {
    if (disposed) return;
    if (pollTimer !== undefined) window.clearTimeout(pollTimer);
    pollTimer = window.setTimeout(() => void poll(), 200);
  }

  cancelButton.addEventListener("click", async () => {
    if (!op || cancelInFlight) return;
    // Nothing is claimed before the server answers: the progress line
    // says "requesting cancel…", the status stays as the server has it.
    cancelInFlight = true;
    setText(cancelError, "");
    renderCancel();
    const mine = ++issued;
    try {
      const next = await call<Operation>("POST", runAPI(runId, "cancel"));
      if (disposed) return;
      cancelInFlight = false;
      cancelAccepted = true; // call throws on anything but 2xx
      if (next && next.id) apply(mine, next);
      renderCancel();
    } catch (err) {
      if (disposed) return;
      cancelInFlight = false;
      setText(cancelError, `cancel failed: ${errorText(err)}`);
      renderCancel();
    }
    pollSoon();
  });

  const onResize = () => {
    if (resizeTimer !== undefined) window.clearTimeout(resizeTimer);
    resizeTimer = window.setTimeout(() => {
      for (const v of views.values()) v.terminal.resize();
    }, 100);
  };
  window.addEventListener("resize", onResize);

  void poll();

  return {
    dispose() {
      disposed = true;
      agent?.dispose();
      if (pollTimer !== undefined) window.clearTimeout(pollTimer);
      if (resizeTimer !== undefined) window.clearTimeout(resizeTimer);
      window.removeEventListener("resize", onResize);
      for (const v of views.values()) {
        v.stream?.close();
        v.terminal.dispose();
      }
      if (shown === terminals) shown = undefined;
    },
  };
}
