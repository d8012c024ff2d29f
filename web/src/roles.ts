// What a role may do in the account's settings, as the gateway decides it
// (gateway/routes.go and checkGrant in gateway/members.go): the page offers
// only what the caller's role may use, and the gateway checks it anyway.

import { type Me, ROLES } from "./api";

/** rank orders roles: viewer 1 ... owner 4, anything else 0. */
export function rank(role: string | undefined): number {
  return (ROLES as readonly string[]).indexOf(role ?? "") + 1;
}

/** isAdmin: the caller is an admin or an owner. */
export function isAdmin(me: Me): boolean {
  return rank(me.role) >= rank("admin");
}

/** isPerson: the caller signed in as a person (members and keys refuse API keys). */
export function isPerson(me: Me): boolean {
  return !!me.account;
}

/** grantable are the roles the caller may give a member or key: an owner any, an admin up to editor. */
export function grantable(me: Me): string[] {
  if (me.role === "owner") return [...ROLES];
  if (me.role === "admin") return ROLES.filter((r) => rank(r) < rank("admin"));
  return [];
}

/** mayManage: the caller may change or remove a member or key of role (owners act on all, admins below admin). */
export function mayManage(me: Me, role: string): boolean {
  return isAdmin(me) && (me.role === "owner" || rank(role) < rank("admin"));
}
