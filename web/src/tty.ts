// Remembering which steps this browser started with a tty, for a gateway
// whose RunStep does not say; a RunStep's "tty" wins.

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
  try {
    return localStorage.getItem(key(s.id)) === "1";
  } catch {
    return false;
  }
}
