// The Rodon page: sign-in, the runs list, the run page, the workspace
// view and the account's settings, routed by the URL hash (#/signin,
// #/runs, #/runs/<id>, #/workspaces/<id>[/<rev>|head[/<path>]],
// #/settings/<tab>), with the account switcher in the header. It talks
// only to the gateway's /v1 routes on its own origin (docs/GATEWAY.md,
// docs/WEB.md).

import "@xterm/xterm/css/xterm.css";
import "./app.css";

import { ApiError, call, errorText, type Me, setCsrfToken, setUnauthorizedHandler } from "./api";
import { AccountSwitcher } from "./accounts";
import { install as installCSPShim, prune as pruneCSPShim } from "./csp";
import { byId, h, replace, setText } from "./dom";
import { HEAD } from "./links";
import type { Page } from "./page";
import { runPage, terminalText } from "./run";
import { runsPage } from "./runs";
import { settingsPage } from "./settings";
import { signInPage } from "./signin";
import { workspacePage } from "./workspace";

declare global {
  interface Window {
    /** rodonTerminalText returns the text of step index's terminal on the run page ("" when none). */
    rodonTerminalText(index: number): string;
  }
}

installCSPShim();
window.rodonTerminalText = terminalText;

let me: Me | undefined;
let page: Page | undefined;

const main = byId("app");
const who = byId("whoami");
const signOut = byId<HTMLButtonElement>("signout");
const settingsLink = byId<HTMLAnchorElement>("settings-link");
const accounts = new AccountSwitcher(async () => {
  // The sign-in acts in another account now: its role, workspaces and
  // token are read again, and a run or workspace of the old one is left.
  try {
    me = await call<Me>("GET", "/v1/me");
    setCsrfToken(me.csrf_token);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) console.warn("read /v1/me:", errorText(err));
    return;
  }
  showUser();
  if (route().name === "settings") render();
  else go("#/runs");
});

type Route =
  | { name: "signin" }
  | { name: "runs" }
  | { name: "run"; id: string }
  | { name: "workspace"; id: string; rev: string; path: string }
  | { name: "settings"; tab: string };

function route(): Route {
  const hash = location.hash.replace(/^#\/?/, "");
  let parts: string[];
  try {
    parts = hash.split("/").filter(Boolean).map(decodeURIComponent);
  } catch {
    return { name: "runs" }; // a malformed escape
  }
  if (parts[0] === "signin") return { name: "signin" };
  if (parts[0] === "runs" && parts[1]) return { name: "run", id: parts[1] };
  if (parts[0] === "settings") return { name: "settings", tab: parts[1] ?? "" };
  if (parts[0] === "workspaces" && parts[1]) {
    const rev = parts[2] && parts[2] !== HEAD ? parts[2] : "";
    return { name: "workspace", id: parts[1], rev, path: parts.slice(3).join("/") };
  }
  return { name: "runs" };
}

function go(hash: string): void {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function showUser(): void {
  const label = me?.account?.email ?? me?.key?.name ?? "";
  setText(who, label ? `${label} (${me?.role ?? ""})` : "");
  signOut.hidden = !me?.account;
  settingsLink.hidden = !me;
  void accounts.show(me);
}

function render(): void {
  page?.dispose();
  page = undefined;
  replace(main);
  pruneCSPShim();
  const r = route();
  document.body.dataset.page = r.name;
  if (!me) {
    if (r.name !== "signin") {
      go("#/signin");
      return;
    }
    page = signInPage(main, (a) => {
      me = { account: a.account, role: a.account.role, workspaces: a.account.workspaces, csrf_token: a.csrf_token };
      showUser();
      go("#/runs");
    });
    document.title = "Sign in \u00b7 Rodon";
    return;
  }
  switch (r.name) {
    case "signin":
      go("#/runs");
      return;
    case "runs":
      document.title = "Runs \u00b7 Rodon";
      page = runsPage(main, (id) => go(`#/runs/${encodeURIComponent(id)}`));
      return;
    case "run":
      document.title = `${r.id} \u00b7 Rodon`;
      page = runPage(main, me, r.id);
      return;
    case "workspace":
      document.title = `${r.id} \u00b7 Rodon`;
      page = workspacePage(main, me, r.id, r.rev, r.path, go);
      return;
    case "settings":
      document.title = "Settings \u00b7 Rodon";
      page = settingsPage(main, me, r.tab, go);
      return;
  }
}

function signedOut(): void {
  me = undefined;
  setCsrfToken(undefined);
  showUser();
  go("#/signin");
}

setUnauthorizedHandler(() => {
  if (me) signedOut();
});

signOut.addEventListener("click", async () => {
  signOut.disabled = true;
  try {
    await call<void>("POST", "/v1/auth/signout");
  } catch (err) {
    // The session is gone either way for this page; say why if it was not a 401.
    if (!(err instanceof ApiError && err.status === 401)) console.warn("sign out:", errorText(err));
  } finally {
    signOut.disabled = false;
  }
  signedOut();
});

async function boot(): Promise<void> {
  try {
    me = await call<Me>("GET", "/v1/me");
    setCsrfToken(me.csrf_token);
  } catch (err) {
    me = undefined;
    if (!(err instanceof ApiError && err.status === 401)) {
      replace(main, h("p", { class: "error card", id: "boot-error", role: "alert" }, errorText(err)));
      window.setTimeout(() => void boot(), 3000);
      return;
    }
  }
  showUser();
  render();
}

window.addEventListener("hashchange", render);
void boot();
