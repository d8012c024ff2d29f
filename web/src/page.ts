// What the router holds: the page on screen.

/** Page is one screen; dispose stops its timers and connections. */
export interface Page {
  dispose(): void;
}
