// Remembering which steps this browser started with a tty. The documented
// RunStep does not say; a gateway that adds "tty" (or "spec.tty") wins.

import type { RunStep } from "./api";

const key = (stepId: string) => `rodon.tty.${stepId}`;

/** rememberTTY records that the step was started with tty set. */
export function rememberTTY(stepId: string): void {
  try {
    localStorage.setItem(key(stepId), "1");
  } catch {
    // Storage disabled: the terminal of that step is then read-only.
  }
}

/** isTTY reports whether the step is interactive. */
export function isTTY(s: RunStep): boolean {
  if (typeof s.tty === "boolean") return s.tty;
  if (typeof s.spec?.tty === "boolean") return s.spec.tty;
  try {
    return localStorage.getItem(key(s.id)) === "1";
  } catch {
    return false;
  }
}
