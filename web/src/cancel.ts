// What the cancel status line says. It repeats only what the server said:
// "cancel confirmed" appears once a confirmed_at is there, never before.

import { type Operation, runEnded, stepEnded } from "./api";

export const CANCEL_REQUESTED = "cancel requested";
export const CANCEL_CONFIRMED = "cancel confirmed";
export const CANCEL_UNVERIFIED = "cancel unverified: ";

/**
 * cancelStatus derives the status text from the run as last read and from
 * whether this page asked for the cancel (before the server shows it):
 *
 *   - the run's cancel decides when it has confirmed_at or unverified;
 *   - otherwise a step's cancel marked unverified makes it unverified;
 *   - otherwise it is confirmed only when every step is ended and every
 *     step cancel that exists (at least one) has confirmed_at;
 *   - otherwise any cancel record, or our own request, is "requested".
 */
export function cancelStatus(op: Operation, requestedHere: boolean): string {
  const run = op.cancel ?? undefined;
  if (run?.confirmed_at) return CANCEL_CONFIRMED;
  if (run?.unverified) return CANCEL_UNVERIFIED + run.unverified;
  const steps = op.steps.filter((s) => s.cancel);
  const unverified = steps.find((s) => s.cancel?.unverified);
  if (unverified) return CANCEL_UNVERIFIED + unverified.cancel!.unverified;
  if (
    steps.length > 0 &&
    steps.every((s) => s.cancel?.confirmed_at) &&
    op.steps.every((s) => stepEnded(s.state))
  ) {
    return CANCEL_CONFIRMED;
  }
  if (run || steps.length > 0) return CANCEL_REQUESTED;
  if (!requestedHere) return "";
  if (runEnded(op)) return `cancel not needed: the run already ended (${op.state})`;
  return CANCEL_REQUESTED;
}

/** cancelSettled reports whether the status can no longer change. */
export function cancelSettled(status: string): boolean {
  return status === CANCEL_CONFIRMED || status.startsWith(CANCEL_UNVERIFIED) || status.startsWith("cancel not needed");
}
