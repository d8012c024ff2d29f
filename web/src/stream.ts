// The websocket stream of one step (GET /v1/steps/{id}/stream?from=N),
// resumed after a drop so that no frame is lost or shown twice.

import { CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED } from "./api";

export type FrameKind = "stdout" | "stderr" | "event" | "exit";

/** Frame is api.Frame: output, a lifecycle event, or the final exit record. */
export interface Frame {
  seq: number;
  kind: FrameKind;
  data: unknown;
  time: string;
  encoding?: string;
}

/** ExitData is the data of the exit frame (api.Exit). */
export interface ExitData {
  state: string;
  exit_code?: number;
  terminated_by: string;
  reason?: string;
  /** cause is the typed cause of a failure (api.Cause*). */
  cause?: string;
}

export type StreamState = "connecting" | "live" | "retrying" | "ended" | "unavailable" | "closed";

export interface StreamHandlers {
  /** frame gets each frame once, in seq order. */
  frame(f: Frame): void;
  /** state reports the connection's state, with a detail for people. */
  state(s: StreamState, detail: string): void;
  /** open is called each time a connection opens (a tty resends its size). */
  open?(): void;
}

export interface StreamOptions {
  /**
   * giveUp is asked after each failed attempt (one that brought no frame);
   * true stops reconnecting. The run page says yes once the step has ended
   * and a few attempts failed, as a step that never ran has no stream.
   */
  giveUp(failures: number): boolean;
}

const minDelay = 500;
const maxDelay = 10_000;

/** streamURL is the websocket URL of a step's stream, resuming after frame from. */
export function streamURL(stepId: string, from: number): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/steps/${encodeURIComponent(stepId)}/stream?from=${from}`;
}

/**
 * StepStream follows one step's frames. It remembers the last seq it handed
 * on and reconnects with ?from=<last seq> after a drop, with exponential
 * backoff, until the exit frame arrives, close() is called or giveUp says
 * so. Frames at or below the last seq (a server resending) are dropped.
 */
export class StepStream {
  private ws: WebSocket | undefined;
  private timer: number | undefined;
  private failures = 0;
  private gotFrame = false;
  private done = false;
  /** lastSeq is the seq of the last frame handed on (0 before any). */
  lastSeq = 0;

  constructor(
    readonly stepId: string,
    private readonly handlers: StreamHandlers,
    private readonly opts: StreamOptions,
  ) {}

  /** start opens the first connection. */
  start(): void {
    this.connect();
  }

  /** send writes a client frame (stdin, resize); false when not connected. */
  send(msg: object): boolean {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(msg));
    return true;
  }

  /** close stops the stream for good. */
  close(): void {
    if (this.done) return;
    this.finish("closed", "");
  }

  /** connected reports whether a connection is open. */
  get connected(): boolean {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  private connect(): void {
    this.timer = undefined;
    if (this.done) return;
    this.gotFrame = false;
    this.handlers.state(this.lastSeq > 0 ? "retrying" : "connecting", `connecting from frame ${this.lastSeq}`);
    let ws: WebSocket;
    try {
      ws = new WebSocket(streamURL(this.stepId, this.lastSeq));
    } catch (err) {
      this.dropped(`cannot open the stream: ${String(err)}`);
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.handlers.state("live", "");
      this.handlers.open?.();
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (this.ws !== ws || typeof ev.data !== "string") return;
      let f: Frame;
      try {
        f = JSON.parse(ev.data) as Frame;
      } catch {
        // A frame we cannot read is lost if we go on: read it again.
        ws.close(4000, "bad frame");
        return;
      }
      if (typeof f.seq !== "number" || f.seq <= this.lastSeq) return;
      this.lastSeq = f.seq;
      this.gotFrame = true;
      this.failures = 0;
      this.handlers.frame(f);
      if (f.kind === "exit") this.finish("ended", "");
    };
    ws.onclose = (ev: CloseEvent) => {
      if (this.ws !== ws) return;
      this.ws = undefined;
      const why = ev.reason ? `${ev.code} ${ev.reason}` : `code ${ev.code}`;
      // 4401/4403: the gateway's re-check refused the caller (signed out,
      // member changed or removed, key deleted): reconnecting cannot help.
      if (ev.code === CLOSE_UNAUTHORIZED || ev.code === CLOSE_FORBIDDEN) {
        this.finish("unavailable", `stream closed (${why})`);
        return;
      }
      this.dropped(`stream closed (${why})`);
    };
    // onerror is always followed by onclose, which decides.
  }

  private dropped(detail: string): void {
    if (this.done) return;
    if (!this.gotFrame) this.failures++;
    if (this.failures > 0 && this.opts.giveUp(this.failures)) {
      this.finish("unavailable", detail);
      return;
    }
    const delay = Math.min(maxDelay, minDelay * 2 ** Math.max(0, this.failures - 1));
    const jittered = delay / 2 + Math.random() * (delay / 2);
    this.handlers.state("retrying", `${detail}; reconnecting in ${(jittered / 1000).toFixed(1)} s`);
    this.timer = window.setTimeout(() => this.connect(), jittered);
  }

  private finish(state: StreamState, detail: string): void {
    this.done = true;
    if (this.timer !== undefined) window.clearTimeout(this.timer);
    this.timer = undefined;
    const ws = this.ws;
    this.ws = undefined;
    if (ws && ws.readyState <= WebSocket.OPEN) ws.close(1000, "done");
    this.handlers.state(state, detail);
  }
}
