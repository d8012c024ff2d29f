// Controls the settings views share: the workspaces a member or key is
// limited to, and the in-page confirmation of a removal.

import { type Account, callPages, type Key, type Me, type Workspace } from "./api";
import { h, replace, setText } from "./dom";
import { isAdmin, isPerson } from "./roles";

/** WorkspacePicker is a multiple select of workspaces; none chosen means all of them. */
export interface WorkspacePicker {
  el: HTMLSelectElement;
  /** value is the workspaces chosen, [] for all. */
  value(): string[];
  set(ids: string[] | null | undefined): void;
}

/** workspacePicker lists workspaces; ids chosen but not listed (not open to the caller) stay chosen. */
export function workspacePicker(id: string, workspaces: Workspace[]): WorkspacePicker {
  const el = h("select", { id, "data-testid": id, multiple: true, size: Math.min(Math.max(workspaces.length, 2), 5), title: "none chosen: every workspace" });
  const fill = (ids: string[]) => {
    const known = new Set(workspaces.map((w) => w.id));
    replace(
      el,
      workspaces.map((w) => h("option", { value: w.id, selected: ids.includes(w.id) }, w.name)),
      ids.filter((i) => !known.has(i)).map((i) => h("option", { value: i, selected: true }, i)),
    );
  };
  fill([]);
  return {
    el,
    value: () => [...el.selectedOptions].map((o) => o.value),
    set: (ids) => fill(ids ?? []),
  };
}

/** workspacesText names the workspaces of a member or key: "all" when none. */
export function workspacesText(ids: string[] | null | undefined, workspaces: Workspace[]): string {
  if (!ids || ids.length === 0) return "all";
  return ids.map((i) => workspaces.find((w) => w.id === i)?.name ?? i).join(", ");
}

/** Confirm is one in-page question with yes and no (#settings-confirm). */
export interface Confirm {
  el: HTMLElement;
  /** ask shows question; yes runs on "yes" and its error is shown by the view. */
  ask(question: string, target: string, yes: () => void): void;
  hide(): void;
}

/** confirmBox makes the settings' confirmation: the question, "Cancel" and a danger button. */
export function confirmBox(action: string): Confirm {
  const question = h("span", { id: "settings-confirm-question" });
  const yesButton = h("button", { id: "settings-confirm-yes", "data-testid": "settings-confirm-yes", type: "button", class: "danger" }, action);
  const noButton = h("button", { id: "settings-confirm-no", "data-testid": "settings-confirm-no", type: "button" }, "Cancel");
  const el = h("div", { id: "settings-confirm", "data-testid": "settings-confirm", class: "confirm row", role: "alertdialog", hidden: true }, question, h("span", { class: "spacer" }), noButton, yesButton);
  let onYes: (() => void) | undefined;
  yesButton.addEventListener("click", () => {
    el.hidden = true;
    const f = onYes;
    onYes = undefined;
    f?.();
  });
  noButton.addEventListener("click", () => {
    el.hidden = true;
    onYes = undefined;
  });
  return {
    el,
    ask(q, target, yes) {
      setText(question, q);
      el.dataset.target = target;
      onYes = yes;
      el.hidden = false;
      yesButton.focus();
    },
    hide() {
      el.hidden = true;
      onYes = undefined;
    },
  };
}

/**
 * loadNames maps the account's member ids to their emails and key ids to
 * their names, for showing who did something; empty for a caller who may
 * not list them (the lists are for admins signed in as a person).
 */
export async function loadNames(me: Me): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  if (!isAdmin(me) || !isPerson(me)) return names;
  try {
    const [members, keys] = await Promise.all([callPages<Account>("/v1/members?limit=1000"), callPages<Key>("/v1/keys?limit=1000")]);
    for (const m of members) names.set(m.id, m.email);
    for (const k of keys) names.set(k.id, `key ${k.name}`);
  } catch {
    // Ids it is, then.
  }
  return names;
}

/** whoText names an actor: "you", a member's email, a key's name, else its id. */
export function whoText(me: Me, id: string, names: Map<string, string>): string {
  if (!id) return "";
  if (id === me.account?.id || id === me.key?.id) return "you";
  return names.get(id) ?? id;
}
