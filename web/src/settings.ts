// The account's settings (#/settings/<tab>): members, API keys, secrets
// and the audit log, each tab offered only to a role that may see it
// (docs/WEB.md, "Settings"). Every view reads and writes through the
// gateway's /v1 routes; the gateway checks every call anyway.

import { callPages, errorText, type Me, type Workspace } from "./api";
import { auditView } from "./audit";
import { h } from "./dom";
import { keysView } from "./keys";
import { membersView } from "./members";
import type { Page } from "./page";
import { isAdmin, isPerson } from "./roles";
import { secretsView } from "./secrets";

/** SETTINGS_TABS are the settings' views, in the order shown. */
export const SETTINGS_TABS = ["members", "keys", "secrets", "audit"] as const;
export type SettingsTab = (typeof SETTINGS_TABS)[number];

const tabLabel: Record<SettingsTab, string> = { members: "Members", keys: "API keys", secrets: "Secrets", audit: "Audit log" };

/** settingsHash is the settings' view tab. */
export function settingsHash(tab: SettingsTab): string {
  return `#/settings/${tab}`;
}

/**
 * settingsTabs are the views the caller may see: members and keys for an
 * admin or owner signed in as a person, the audit log for an admin or
 * owner, the secrets' names for everyone.
 */
export function settingsTabs(me: Me): SettingsTab[] {
  return SETTINGS_TABS.filter((t) => {
    switch (t) {
      case "members":
      case "keys":
        return isAdmin(me) && isPerson(me);
      case "audit":
        return isAdmin(me);
      case "secrets":
        return true;
    }
  });
}

/** settingsPage shows view tab (the first one the caller may see when it may not see tab). */
export function settingsPage(root: HTMLElement, me: Me, tab: string, go: (hash: string) => void): Page {
  const tabs = settingsTabs(me);
  const shown = tabs.find((t) => t === tab);
  if (!shown) {
    go(settingsHash(tabs[0] ?? "secrets"));
    return { dispose() {} };
  }
  const nav = h(
    "nav",
    { id: "settings-tabs", "data-testid": "settings-tabs", class: "tabs", "aria-label": "settings" },
    tabs.map((t) =>
      h("a", { id: `settings-tab-${t}`, "data-testid": `settings-tab-${t}`, "data-tab": t, href: settingsHash(t), "aria-current": t === shown ? "page" : false }, tabLabel[t]),
    ),
  );
  const body = h("div", { id: `settings-${shown}`, "data-testid": `settings-${shown}`, class: "settings-view" });
  const error = h("p", { id: "settings-error", class: "error", role: "alert" });
  root.appendChild(h("section", { class: "settings", "data-tab": shown }, h("div", { class: "row settings-head" }, h("h1", {}, "Settings"), nav), error, body));

  let view: Page | undefined;
  let disposed = false;
  if (shown === "secrets") view = secretsView(body, me);
  else if (shown === "audit") view = auditView(body, me);
  else {
    // Members and keys name the workspaces they are limited to.
    void (async () => {
      let workspaces: Workspace[] = [];
      try {
        workspaces = await callPages<Workspace>("/v1/workspaces?limit=1000");
        workspaces.sort((a, b) => a.name.localeCompare(b.name));
      } catch (err) {
        error.textContent = `Workspaces: ${errorText(err)}`;
      }
      if (disposed) return;
      view = shown === "members" ? membersView(body, me, workspaces) : keysView(body, me, workspaces);
    })();
  }
  return {
    dispose() {
      disposed = true;
      view?.dispose();
    },
  };
}
