// What the cancel status line says. It repeats only what the server said:
// "cancel requested" appears once the server accepted the cancel (its
// answer to POST /v1/runs/{id}/cancel was 2xx, or a run it served shows
// the cancel), "cancel confirmed" once a confirmed_at is there, never
// before. While this page's request is unanswered the separate progress
// line says "requesting cancel…".

import { type Operation, runEnded, stepEnded } from "./api";

export const CANCEL_REQUESTED = "cancel requested";
export const CANCEL_CONFIRMED = "cancel confirmed";
export const CANCEL_UNVERIFIED = "cancel unverified: ";
export const CANCEL_REQUESTING = "requesting cancel\u2026";

/**
 * cancelStatus derives the status text from the run as last read and from
 * whether the server accepted this page's cancel (acceptedHere: its
 * answer was 2xx), which may come before a run read shows the cancel:
 *
 *   - the run's cancel decides when it has confirmed_at or unverified;
 *   - otherwise a step's cancel marked unverified makes it unverified;
 *   - otherwise it is confirmed only when every step is ended and every
 *     step cancel that exists (at least one) has confirmed_at;
 *   - otherwise any cancel record, or our accepted request, is "requested".
 */
export function cancelStatus(op: Operation, acceptedHere: boolean): string {
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
  if (!acceptedHere) return "";
  if (runEnded(op)) return `cancel not needed: the run already ended (${op.state})`;
  return CANCEL_REQUESTED;
}

/**
 * cancelProgress is the progress line beside the status: "requesting
 * cancel…" while this page's request is unanswered and the status says
 * nothing yet, else "".
 */
export function cancelProgress(inFlight: boolean, status: string): string {
  return inFlight && status === "" ? CANCEL_REQUESTING : "";
}

/** cancelSettled reports whether the status can no longer change. */
export function cancelSettled(status: string): boolean {
  return status === CANCEL_CONFIRMED || status.startsWith(CANCEL_UNVERIFIED) || status.startsWith("cancel not needed");
}
