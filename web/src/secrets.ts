// The secrets view of the settings (#/settings/secrets, every role): the
// account's secrets by name, version, who set them and when. Admins and
// owners set, replace and delete them. No value is ever shown: the gateway
// answers none, and the value typed is sent once and cleared from the
// page at once.

import { call, callPages, errorText, type Me, type PutSecretRequest, type Secret } from "./api";
import { confirmBox, loadNames, whoText } from "./controls";
import { h, replace, setText } from "./dom";
import { dateTime } from "./format";
import type { Page } from "./page";
import { isAdmin } from "./roles";

/** secretName is a name an agent file can list (gateway/agentfile's secretRE); the gateway checks it too. */
const secretName = /^[A-Z_][A-Z0-9_]*$/;

/** secretsView shows the secrets of the caller's account. */
export function secretsView(root: HTMLElement, me: Me): Page {
  let disposed = false;
  let names = new Map<string, string>();
  const admin = isAdmin(me);

  const name = h("input", {
    id: "secret-name",
    "data-testid": "secret-name",
    type: "text",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    maxlength: 100,
    title: "capital letters, digits and _, as an agent file names it",
    placeholder: "OPENAI_API_KEY",
  });
  const value = h("input", { id: "secret-value", "data-testid": "secret-value", type: "password", autocomplete: "new-password", required: true });
  const submit = h("button", { id: "secret-set-submit", "data-testid": "secret-set-submit", type: "submit", class: "primary" }, "Set secret");
  const status = h("p", { id: "secret-set-status", "data-testid": "secret-set-status", class: "muted", role: "status" });
  const formError = h("p", { id: "secret-set-error", "data-testid": "secret-set-error", class: "error", role: "alert" });
  const form = admin
    ? h(
        "form",
        { id: "secret-set", class: "card" },
        h("h2", {}, "Set a secret"),
        h("p", { class: "muted" }, "A step of an agent whose file names the secret gets its value in its environment; nobody can read it back. Setting an existing name replaces its value with a new version."),
        h("div", { class: "row" }, h("label", { class: "field" }, "Name", name), h("label", { class: "field grow" }, "Value", value), submit),
        formError,
        status,
      )
    : h("p", { id: "secrets-read-only", "data-testid": "secrets-read-only", class: "note" }, `You see the secrets' names as ${me.role}: an admin or owner sets and deletes them. Nobody reads a value.`);

  const listError = h("p", { id: "secrets-error", "data-testid": "secrets-error", class: "error", role: "alert" });
  // A reader's page holds no write control at all, hidden or not.
  const confirm = admin ? confirmBox("Delete") : undefined;
  const tbody = h("tbody");
  const table = h(
    "table",
    { id: "secrets-table", "data-testid": "secrets-table", class: "grid" },
    h("thead", {}, h("tr", {}, ["name", "version", "set by", "set", "created", admin ? "" : null].filter((c) => c !== null).map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const empty = h("p", { id: "secrets-empty", class: "muted", hidden: true }, "No secrets yet.");
  root.appendChild(h("div", {}, form, h("div", { class: "card" }, h("h2", {}, "Secrets"), confirm?.el, listError, h("div", { class: "scroll-x" }, table), empty)));

  function row(s: Secret): HTMLTableRowElement {
    const tr = h(
      "tr",
      { "data-testid": "secret-row", "data-name": s.name, "data-version": s.version },
      h("td", { class: "mono" }, s.name),
      h("td", { class: "num" }, String(s.version)),
      h("td", { "data-kind": s.updated_by?.kind ?? "", "data-id": s.updated_by?.id ?? "" }, whoText(me, s.updated_by?.id ?? "", names)),
      h("td", { title: s.updated_at }, dateTime(s.updated_at)),
      h("td", { title: s.created_at }, dateTime(s.created_at)),
    );
    if (admin) {
      const replaceButton = h("button", { type: "button", "data-action": "replace", title: `set a new value for ${s.name}` }, "Replace");
      replaceButton.addEventListener("click", () => {
        name.value = s.name;
        value.value = "";
        value.focus();
      });
      const del = h("button", { type: "button", class: "danger", "data-action": "delete", title: `delete ${s.name}` }, "Delete");
      del.addEventListener("click", () => confirm?.ask(`Delete the secret ${s.name}? Steps started from now on do not get it.`, s.name, () => void remove(s)));
      tr.append(h("td", { class: "actions" }, replaceButton, " ", del));
    }
    return tr;
  }

  async function load(): Promise<void> {
    try {
      const secrets = await callPages<Secret>("/v1/secrets?limit=1000");
      if (disposed) return;
      secrets.sort((a, b) => a.name.localeCompare(b.name));
      replace(tbody, secrets.map(row));
      empty.hidden = secrets.length > 0;
      setText(listError, "");
    } catch (err) {
      if (!disposed) setText(listError, errorText(err));
    }
  }

  async function remove(s: Secret): Promise<void> {
    setText(listError, "");
    setText(status, "");
    try {
      await call<void>("DELETE", `/v1/secrets/${encodeURIComponent(s.name)}`);
    } catch (err) {
      setText(listError, `Delete ${s.name}: ${errorText(err)}`);
      return;
    }
    await load();
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (!admin) return;
    setText(formError, "");
    setText(status, "");
    const n = name.value.trim();
    if (!secretName.test(n)) {
      setText(formError, `Name ${JSON.stringify(n)}: want capital letters, digits and _, not starting with a digit, as an agent file names it.`);
      return;
    }
    const req: PutSecretRequest = { value: value.value };
    // The value leaves the page with this request and nowhere else.
    value.value = "";
    submit.disabled = true;
    try {
      const s = await call<Secret | undefined>("PUT", `/v1/secrets/${encodeURIComponent(n)}`, req);
      setText(status, s?.version ? `${n} set: version ${s.version}.` : `${n} set.`);
      name.value = "";
      await load();
    } catch (err) {
      setText(formError, errorText(err));
    } finally {
      req.value = "";
      submit.disabled = false;
    }
  });

  void (async () => {
    names = await loadNames(me);
    await load();
  })();
  return {
    dispose() {
      disposed = true;
      value.value = "";
    },
  };
}
