// The API keys view of the settings (#/settings/keys, admins and owners
// signed in as a person): the account's keys with their role, workspaces
// and last use, create (the secret shown once) and delete.

import { call, callPages, type CreateKeyAnswer, type CreateKeyRequest, errorText, type Key, type Me, type Workspace } from "./api";
import { confirmBox, workspacePicker, workspacesText } from "./controls";
import { h, replace, setText } from "./dom";
import { dateTime } from "./format";
import type { Page } from "./page";
import { grantable, mayManage } from "./roles";

/** keysView shows the API keys of the caller's account. */
export function keysView(root: HTMLElement, me: Me, workspaces: Workspace[]): Page {
  let disposed = false;

  const name = h("input", { id: "key-name", "data-testid": "key-name", type: "text", autocomplete: "off", required: true, maxlength: 100, placeholder: "ci-deploy" });
  const role = h("select", { id: "key-role", "data-testid": "key-role" }, grantable(me).map((r) => h("option", { value: r, selected: r === "editor" }, r)));
  const picker = workspacePicker("key-workspaces", workspaces);
  const submit = h("button", { id: "key-create-submit", "data-testid": "key-create-submit", type: "submit", class: "primary" }, "Create key");
  const formError = h("p", { id: "key-create-error", "data-testid": "key-create-error", class: "error", role: "alert" });

  // The new key's secret: shown once, in this element only, until hidden.
  const secretValue = h("code", { id: "key-secret-value", "data-testid": "key-secret-value", class: "secret-value" });
  const secretName = h("strong", {});
  const copy = h("button", { id: "key-secret-copy", type: "button" }, "Copy");
  const hide = h("button", { id: "key-secret-hide", "data-testid": "key-secret-hide", type: "button", class: "primary" }, "I have saved it");
  const secretBox = h(
    "div",
    { id: "key-secret", "data-testid": "key-secret", class: "warning", role: "status", hidden: true },
    h("p", {}, "The secret of ", secretName, ", shown this once: save it now, it cannot be read again."),
    h("div", { class: "row" }, secretValue, h("span", { class: "spacer" }), copy, hide),
  );
  const form = h(
    "form",
    { id: "key-create", class: "card" },
    h("h2", {}, "Create an API key"),
    h(
      "div",
      { class: "row" },
      h("label", { class: "field grow" }, "Name", name),
      h("label", { class: "field" }, "Role", role),
      h("label", { class: "field" }, "Workspaces (none: all)", picker.el),
      submit,
    ),
    formError,
    secretBox,
  );

  const listError = h("p", { id: "keys-error", "data-testid": "keys-error", class: "error", role: "alert" });
  const confirm = confirmBox("Delete");
  const tbody = h("tbody");
  const table = h(
    "table",
    { id: "keys-table", "data-testid": "keys-table", class: "grid" },
    h("thead", {}, h("tr", {}, ["name", "id", "role", "workspaces", "created", "last used", ""].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const empty = h("p", { id: "keys-empty", class: "muted", hidden: true }, "No API keys yet.");
  root.appendChild(h("div", {}, form, h("div", { class: "card" }, h("h2", {}, "API keys"), confirm.el, listError, h("div", { class: "scroll-x" }, table), empty)));

  function row(k: Key): HTMLTableRowElement {
    const actions = h("td", { class: "actions" });
    if (mayManage(me, k.role)) {
      const del = h("button", { type: "button", class: "danger", "data-action": "delete", title: `delete ${k.name}: programs using it are refused from then on` }, "Delete");
      del.addEventListener("click", () => confirm.ask(`Delete the key ${k.name} (${k.id})? Programs using it are refused from now on.`, k.id, () => void remove(k)));
      actions.append(del);
    }
    return h(
      "tr",
      { "data-testid": "key-row", "data-key-id": k.id, "data-name": k.name, "data-role": k.role },
      h("td", {}, k.name),
      h("td", { class: "mono" }, k.id),
      h("td", {}, h("span", { class: `state role-${k.role}` }, k.role)),
      h("td", {}, workspacesText(k.workspaces, workspaces)),
      h("td", { title: k.created_at }, dateTime(k.created_at)),
      h("td", { class: "last-used", title: k.last_used_at ?? "" }, k.last_used_at ? dateTime(k.last_used_at) : h("span", { class: "muted" }, "never")),
      actions,
    );
  }

  async function load(): Promise<void> {
    try {
      const keys = await callPages<Key>("/v1/keys?limit=1000");
      if (disposed) return;
      keys.sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
      replace(tbody, keys.map(row));
      empty.hidden = keys.length > 0;
      setText(listError, "");
    } catch (err) {
      if (!disposed) setText(listError, errorText(err));
    }
  }

  async function remove(k: Key): Promise<void> {
    setText(listError, "");
    try {
      await call<void>("DELETE", `/v1/keys/${encodeURIComponent(k.id)}`);
    } catch (err) {
      setText(listError, `Delete ${k.name}: ${errorText(err)}`);
      return;
    }
    await load();
  }

  function hideSecret(): void {
    secretBox.hidden = true;
    secretValue.textContent = "";
  }
  hide.addEventListener("click", hideSecret);
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(secretValue.textContent ?? "");
      setText(copy, "Copied");
    } catch {
      // No clipboard (an insecure origin): select the text to copy by hand.
      getSelection()?.selectAllChildren(secretValue);
    }
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    setText(formError, "");
    hideSecret();
    submit.disabled = true;
    const req: CreateKeyRequest = { name: name.value.trim(), role: role.value, workspaces: picker.value() };
    try {
      const a = await call<CreateKeyAnswer>("POST", "/v1/keys", req);
      setText(secretName, `${a.key.name} (${a.key.id})`);
      secretValue.textContent = a.secret;
      setText(copy, "Copy");
      secretBox.hidden = false;
      name.value = "";
      picker.set([]);
      await load();
    } catch (err) {
      setText(formError, errorText(err));
    } finally {
      submit.disabled = false;
    }
  });

  void load();
  return {
    dispose() {
      disposed = true;
      hideSecret();
    },
  };
}
