// The operations list, the new-run form and the "open shell" button.

import { call, callPages, errorText, type Operation, type StepSpec, type Workspace } from "./api";
import { splitArgs } from "./args";
import { h, replace, setText } from "./dom";
import { dateTime } from "./format";
import { workspaceHash } from "./links";
import type { Page } from "./page";
import { rememberTTY } from "./tty";

const refreshEvery = 3000;
/** listLimit is how many of the newest runs the list shows. */
const listLimit = 100;
const runStates = ["running", "succeeded", "failed", "cancelled"];

/** runsPage shows the list; open navigates to a run. */
export function runsPage(root: HTMLElement, open: (runId: string) => void): Page {
  let workspaces: Workspace[] = [];
  let timer: number | undefined;
  let disposed = false;
  let generation = 0;

  // Filters.
  const filterWorkspace = h("select", { id: "runs-filter-workspace", "data-testid": "runs-filter-workspace" }, h("option", { value: "" }, "all workspaces"));
  const filterState = h(
    "select",
    { id: "runs-filter-state", "data-testid": "runs-filter-state" },
    h("option", { value: "" }, "any state"),
    runStates.map((s) => h("option", { value: s }, s)),
  );
  const listError = h("p", { id: "runs-error", class: "error", role: "alert" });
  const tbody = h("tbody");
  const table = h(
    "table",
    { id: "runs-table", "data-testid": "runs-table", class: "grid clickable" },
    h("thead", {}, h("tr", {}, ["run", "workspace", "state", "created", "steps"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const empty = h("p", { id: "runs-empty", class: "muted", hidden: true }, "No runs yet.");

  // New run form.
  const wsSelect = h("select", { id: "new-run-workspace", "data-testid": "new-run-workspace", required: true });
  const image = h(
    "select",
    { id: "new-run-image", "data-testid": "new-run-image" },
    h("option", { value: "base" }, "base"),
    h("option", { value: "python" }, "python"),
  );
  const args = h("input", {
    id: "new-run-args",
    "data-testid": "new-run-args",
    type: "text",
    placeholder: "python3 -c 'print(42)'",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
  });
  const noInternet = h("input", { id: "new-run-no-internet", "data-testid": "new-run-no-internet", type: "checkbox" });
  const submit = h("button", { id: "new-run-submit", "data-testid": "new-run-submit", type: "submit", class: "primary" }, "Run");
  const shell = h("button", { id: "open-shell", "data-testid": "open-shell", type: "button" }, "Open shell");
  const files = h("a", { id: "open-workspace", "data-testid": "open-workspace", class: "button", href: "#/runs", hidden: true }, "Files");
  const library = h("a", { id: "open-library", "data-testid": "open-library", class: "button", href: "#/runs", hidden: true, title: "the account library, at /library in every step" }, "Library");
  const formError = h("p", { id: "new-run-error", "data-testid": "new-run-error", class: "error", role: "alert" });
  const form = h(
    "form",
    { id: "new-run-form", class: "card new-run" },
    h("h2", {}, "New run"),
    h(
      "div",
      { class: "row" },
      h("label", { class: "field" }, "Workspace", wsSelect),
      h("label", { class: "field" }, "Image", image),
      h("label", { class: "field grow" }, "Command", args),
    ),
    h(
      "div",
      { class: "row" },
      h("label", { class: "check" }, noInternet, " no internet"),
      h("span", { class: "spacer" }),
      library,
      files,
      shell,
      submit,
    ),
    formError,
  );

  root.appendChild(
    h(
      "section",
      { class: "runs" },
      form,
      h(
        "div",
        { class: "card" },
        h("div", { class: "row" }, h("h2", {}, "Runs"), h("span", { class: "spacer" }), filterWorkspace, filterState),
        listError,
        table,
        empty,
      ),
    ),
  );

  function workspaceName(id: string): string {
    return workspaces.find((w) => w.id === id)?.name ?? id;
  }

  function fillWorkspaces(): void {
    const keepFilter = filterWorkspace.value;
    const keepNew = wsSelect.value;
    replace(filterWorkspace, h("option", { value: "" }, "all workspaces"), workspaces.map((w) => h("option", { value: w.id }, w.name)));
    replace(wsSelect, workspaces.map((w) => h("option", { value: w.id }, w.name)));
    if (workspaces.some((w) => w.id === keepFilter)) filterWorkspace.value = keepFilter;
    if (workspaces.some((w) => w.id === keepNew)) wsSelect.value = keepNew;
    showFilesLink();
    const none = workspaces.length === 0;
    submit.disabled = none;
    shell.disabled = none;
    if (none) formError.textContent = "No workspace is open to you; ask an admin to create one or to grant you one.";
  }

  function showFilesLink(): void {
    files.hidden = !wsSelect.value;
    files.setAttribute("href", wsSelect.value ? workspaceHash(wsSelect.value) : "#/runs");
    files.title = wsSelect.value ? `the files of ${workspaceName(wsSelect.value)}` : "";
  }

  function row(op: Operation): HTMLTableRowElement {
    const link = h("a", { href: `#/runs/${encodeURIComponent(op.id)}`, class: "mono" }, op.id);
    const tr = h(
      "tr",
      { "data-testid": "run-row", "data-run-id": op.id, tabindex: "0" },
      h("td", {}, link),
      h("td", {}, h("a", { href: workspaceHash(op.workspace), "data-testid": "run-row-workspace", title: "the workspace's files" }, workspaceName(op.workspace))),
      h("td", {}, h("span", { class: `state state-${op.state}`, "data-testid": "run-row-state" }, op.state)),
      h("td", { title: op.created_at }, dateTime(op.created_at)),
      h("td", { class: "num" }, String(op.steps?.length ?? 0)),
    );
    tr.addEventListener("click", (ev) => {
      if ((ev.target as HTMLElement).closest("a")) return;
      open(op.id);
    });
    tr.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") open(op.id);
    });
    return tr;
  }

  async function loadRuns(): Promise<void> {
    const mine = ++generation;
    const q = new URLSearchParams();
    if (filterWorkspace.value) q.set("workspace", filterWorkspace.value);
    if (filterState.value) q.set("state", filterState.value);
    q.set("limit", String(listLimit));
    try {
      // The newest runs: a filtered page may hold few, so read on a little.
      const ops = (await callPages<Operation>("/v1/runs?" + q.toString(), { want: listLimit, maxPages: 5 })).slice(0, listLimit);
      if (disposed || mine !== generation) return;
      replace(tbody, ops.map(row));
      empty.hidden = ops.length > 0;
      setText(listError, "");
    } catch (err) {
      if (!disposed && mine === generation) setText(listError, errorText(err));
    }
  }

  function schedule(): void {
    if (disposed) return;
    timer = window.setTimeout(async () => {
      await loadRuns();
      schedule();
    }, refreshEvery);
  }

  async function start(spec: StepSpec, button: HTMLButtonElement): Promise<void> {
    formError.textContent = "";
    if (!wsSelect.value) {
      formError.textContent = "Choose a workspace.";
      return;
    }
    button.disabled = true;
    try {
      const op = await call<Operation>("POST", "/v1/runs", { workspace: wsSelect.value, steps: [spec] });
      if (spec.tty) for (const s of op.steps ?? []) rememberTTY(s.id);
      open(op.id);
    } catch (err) {
      formError.textContent = errorText(err);
    } finally {
      button.disabled = false;
    }
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    let argv: string[];
    try {
      argv = splitArgs(args.value);
    } catch (err) {
      formError.textContent = `Command: ${errorText(err)}`;
      return;
    }
    if (argv.length === 0) {
      formError.textContent = "Command: type the program to run and its arguments.";
      return;
    }
    const spec: StepSpec = { args: argv, image: image.value === "python" ? "python" : "base" };
    if (noInternet.checked) spec.no_internet = true;
    void start(spec, submit);
  });
  shell.addEventListener("click", () => {
    void start({ args: ["/bin/bash"], image: "base", tty: true }, shell);
  });
  wsSelect.addEventListener("change", showFilesLink);
  filterWorkspace.addEventListener("change", () => void loadRuns());
  filterState.addEventListener("change", () => void loadRuns());

  void (async () => {
    try {
      workspaces = await callPages<Workspace>("/v1/workspaces?limit=1000");
      workspaces.sort((a, b) => a.name.localeCompare(b.name));
      if (disposed) return;
      fillWorkspaces();
    } catch (err) {
      if (!disposed) formError.textContent = errorText(err);
    }
    try {
      const lib = await call<Workspace>("GET", "/v1/library");
      if (!disposed && lib?.id) {
        library.setAttribute("href", workspaceHash(lib.id));
        library.hidden = false;
      }
    } catch {
      // No library on this gateway: no link.
    }
    await loadRuns();
    schedule();
  })();

  return {
    dispose() {
      disposed = true;
      if (timer !== undefined) window.clearTimeout(timer);
    },
  };
}
