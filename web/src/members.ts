// The members view of the settings (#/settings/members, admins and owners
// signed in as a person): the account's members with their role and
// workspaces, invite, change role and workspaces, remove.

import { type Account, call, callPages, type CreateMemberRequest, errorText, type Me, type UpdateMemberRequest, type Workspace } from "./api";
import { confirmBox, workspacePicker, workspacesText } from "./controls";
import { h, replace, setText } from "./dom";
import { dateTime } from "./format";
import type { Page } from "./page";
import { grantable, mayManage } from "./roles";

function roleSelect(id: string, roles: string[], chosen: string): HTMLSelectElement {
  return h("select", { id, "data-testid": id }, roles.map((r) => h("option", { value: r, selected: r === chosen }, r)));
}

/** membersView shows the members of the caller's account. */
export function membersView(root: HTMLElement, me: Me, workspaces: Workspace[]): Page {
  let disposed = false;
  let members: Account[] = [];
  const roles = grantable(me);

  // Invite.
  const email = h("input", { id: "member-email", "data-testid": "member-email", type: "email", autocomplete: "off", required: true, placeholder: "name@example.com" });
  const password = h("input", { id: "member-password", "data-testid": "member-password", type: "password", autocomplete: "new-password", required: true, title: "their first password: tell it to them yourself" });
  const role = roleSelect("member-role", roles, "viewer");
  const picker = workspacePicker("member-workspaces", workspaces);
  const submit = h("button", { id: "member-invite-submit", "data-testid": "member-invite-submit", type: "submit", class: "primary" }, "Invite");
  const inviteError = h("p", { id: "member-invite-error", "data-testid": "member-invite-error", class: "error", role: "alert" });
  const invited = h("p", { id: "member-invite-status", "data-testid": "member-invite-status", class: "muted", role: "status" });
  const form = h(
    "form",
    { id: "member-invite", class: "card" },
    h("h2", {}, "Invite a member"),
    h(
      "div",
      { class: "row" },
      h("label", { class: "field grow" }, "Email", email),
      h("label", { class: "field" }, "First password", password),
      h("label", { class: "field" }, "Role", role),
      h("label", { class: "field" }, "Workspaces (none: all)", picker.el),
      submit,
    ),
    inviteError,
    invited,
  );

  // The list, with an editor and a confirmation above it.
  const listError = h("p", { id: "members-error", "data-testid": "members-error", class: "error", role: "alert" });
  const confirm = confirmBox("Remove");
  const editRole = roleSelect("member-edit-role", roles, "viewer");
  const editPicker = workspacePicker("member-edit-workspaces", workspaces);
  const editSave = h("button", { id: "member-edit-save", "data-testid": "member-edit-save", type: "submit", class: "primary" }, "Save");
  const editCancel = h("button", { id: "member-edit-cancel", type: "button" }, "Cancel");
  const editWho = h("strong", { id: "member-edit-email" });
  const edit = h(
    "form",
    { id: "member-edit", "data-testid": "member-edit", class: "note", hidden: true },
    h(
      "div",
      { class: "row" },
      h("span", {}, "Change ", editWho),
      h("label", { class: "field" }, "Role", editRole),
      h("label", { class: "field" }, "Workspaces (none: all)", editPicker.el),
      h("span", { class: "spacer" }),
      editCancel,
      editSave,
    ),
  );
  const tbody = h("tbody");
  const table = h(
    "table",
    { id: "members-table", "data-testid": "members-table", class: "grid" },
    h("thead", {}, h("tr", {}, ["email", "role", "workspaces", "member since", ""].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  root.appendChild(h("div", {}, form, h("div", { class: "card" }, h("h2", {}, "Members"), confirm.el, edit, listError, h("div", { class: "scroll-x" }, table))));

  function row(m: Account): HTMLTableRowElement {
    const actions = h("td", { class: "actions" });
    if (mayManage(me, m.role)) {
      const change = h("button", { type: "button", "data-action": "edit", title: `change ${m.email}'s role and workspaces` }, "Change");
      change.addEventListener("click", () => openEdit(m));
      const remove = h("button", { type: "button", class: "danger", "data-action": "remove", title: `remove ${m.email} from the account` }, "Remove");
      remove.addEventListener("click", () => {
        edit.hidden = true;
        confirm.ask(`Remove ${m.email} from the account? Their sign-ins end now.`, m.id, () => void removeMember(m));
      });
      actions.append(change, " ", remove);
    }
    return h(
      "tr",
      { "data-testid": "member-row", "data-member-id": m.id, "data-email": m.email, "data-role": m.role },
      h("td", {}, m.email, m.id === me.account?.id ? h("span", { class: "badge" }, "you") : null),
      h("td", {}, h("span", { class: `state role-${m.role}` }, m.role)),
      h("td", { class: "member-workspaces" }, workspacesText(m.workspaces, workspaces)),
      h("td", { title: m.created_at ?? "" }, dateTime(m.created_at)),
      actions,
    );
  }

  let editing: Account | undefined;
  function openEdit(m: Account): void {
    confirm.hide();
    editing = m;
    setText(editWho, m.email);
    edit.dataset.memberId = m.id;
    editRole.value = m.role;
    editPicker.set(m.workspaces);
    edit.hidden = false;
    editRole.focus();
  }

  async function load(): Promise<void> {
    try {
      members = await callPages<Account>("/v1/members?limit=1000");
      if (disposed) return;
      members.sort((a, b) => a.email.localeCompare(b.email));
      replace(tbody, members.map(row));
      setText(listError, "");
    } catch (err) {
      if (!disposed) setText(listError, errorText(err));
    }
  }

  async function removeMember(m: Account): Promise<void> {
    setText(listError, "");
    try {
      await call<void>("DELETE", `/v1/members/${encodeURIComponent(m.id)}`);
    } catch (err) {
      setText(listError, `Remove ${m.email}: ${errorText(err)}`);
      return;
    }
    await load();
  }

  editCancel.addEventListener("click", () => {
    edit.hidden = true;
    editing = undefined;
  });
  edit.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const m = editing;
    if (!m) return;
    setText(listError, "");
    editSave.disabled = true;
    const req: UpdateMemberRequest = { role: editRole.value, workspaces: editPicker.value() };
    try {
      await call<Account>("PATCH", `/v1/members/${encodeURIComponent(m.id)}`, req);
      edit.hidden = true;
      editing = undefined;
    } catch (err) {
      setText(listError, `Change ${m.email}: ${errorText(err)}`);
    } finally {
      editSave.disabled = false;
    }
    await load();
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    setText(inviteError, "");
    setText(invited, "");
    submit.disabled = true;
    const req: CreateMemberRequest = { email: email.value.trim(), password: password.value, role: role.value, workspaces: picker.value() };
    try {
      const m = await call<Account>("POST", "/v1/members", req);
      // The first password is not kept on the page.
      password.value = "";
      email.value = "";
      picker.set([]);
      setText(invited, `${m.email} is a member (${m.role}): they sign in with the password you chose.`);
      await load();
    } catch (err) {
      setText(inviteError, errorText(err));
    } finally {
      submit.disabled = false;
    }
  });

  void load();
  return {
    dispose() {
      disposed = true;
    },
  };
}
