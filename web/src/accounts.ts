// The account switcher in the header: a person who is a member of more
// than one account (GET /v1/accounts) moves their sign-in to another
// (POST /v1/auth/switch); the page then reads /v1/me again.

import { ApiError, call, errorText, type Me, type SwitchAccountRequest, type Tenant } from "./api";
import { byId, h, replace, setText } from "./dom";

/**
 * AccountSwitcher fills #account-switch (hidden unless there is a choice)
 * and #account-name (the current account's name).
 */
export class AccountSwitcher {
  private readonly select = byId<HTMLSelectElement>("account-switch");
  private readonly name = byId("account-name");
  private readonly error = byId("account-switch-error");
  private generation = 0;

  /** switched is called after a switch, with the new tenant's id. */
  constructor(private readonly switched: (account: string) => Promise<void>) {
    this.select.addEventListener("change", () => void this.switchTo(this.select.value));
  }

  /** show reads the caller's accounts; nothing is shown for an API key or without a sign-in. */
  async show(me: Me | undefined): Promise<void> {
    const mine = ++this.generation;
    setText(this.error, "");
    if (!me?.account) {
      this.clear();
      return;
    }
    let accounts: Tenant[];
    try {
      accounts = (await call<Tenant[] | null>("GET", "/v1/accounts")) ?? [];
    } catch (err) {
      if (mine !== this.generation) return;
      this.clear();
      // A gateway of one organisation has no accounts to choose from.
      if (!(err instanceof ApiError && err.status === 404)) setText(this.error, `accounts: ${errorText(err)}`);
      return;
    }
    if (mine !== this.generation) return;
    const current = accounts.find((a) => a.current);
    setText(this.name, accounts.length > 1 ? "" : current?.name ?? "");
    this.name.hidden = accounts.length > 1 || !current;
    replace(
      this.select,
      accounts.map((a) => h("option", { value: a.id, selected: !!a.current, "data-role": a.role ?? "" }, a.role ? `${a.name} (${a.role})` : a.name)),
    );
    this.select.hidden = accounts.length <= 1;
    this.select.dataset.current = current?.id ?? "";
  }

  private clear(): void {
    replace(this.select);
    this.select.hidden = true;
    this.select.dataset.current = "";
    setText(this.name, "");
    this.name.hidden = true;
  }

  private async switchTo(account: string): Promise<void> {
    const was = this.select.dataset.current ?? "";
    if (!account || account === was) return;
    setText(this.error, "");
    this.select.disabled = true;
    try {
      const req: SwitchAccountRequest = { account };
      await call<unknown>("POST", "/v1/auth/switch", req);
    } catch (err) {
      setText(this.error, errorText(err));
      this.select.value = was;
      this.select.disabled = false;
      return;
    }
    this.select.disabled = false;
    await this.switched(account);
  }
}
