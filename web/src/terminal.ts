// One step's terminal: an xterm.js Terminal fed by the step's stream.

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import type { Frame } from "./stream";

const encoder = new TextEncoder();
// Stderr of a non-tty step is tinted unless it carries its own escapes.
const stderrOn = encoder.encode("\x1b[91m");
const stderrOff = encoder.encode("\x1b[39m");

/** outputBytes returns the bytes of a stdout or stderr frame (base64 when encoding says so). */
export function outputBytes(f: Frame): Uint8Array {
  const s = typeof f.data === "string" ? f.data : "";
  if (f.encoding !== "base64") return encoder.encode(s);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * StepTerminal shows one step's output. Output is always written as bytes,
 * so xterm's own UTF-8 decoder joins a character split across frames.
 * For a tty step, keystrokes and size changes go to the handlers given.
 */
export class StepTerminal {
  readonly term: Terminal;
  private readonly fit = new FitAddon();

  constructor(
    readonly container: HTMLElement,
    readonly tty: boolean,
    input?: { data(s: string): void; resize(cols: number, rows: number): void },
  ) {
    this.term = new Terminal({
      convertEol: !tty,
      disableStdin: !tty,
      cursorBlink: tty,
      cursorStyle: tty ? "block" : "underline",
      cursorInactiveStyle: tty ? "outline" : "none",
      scrollback: 10_000,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace',
      fontSize: 13,
      theme: {
        background: "#11151c",
        foreground: "#d8dee9",
        cursor: "#d8dee9",
        selectionBackground: "#3b4252",
      },
    });
    this.term.loadAddon(this.fit);
    this.term.open(container);
    if (tty && input) {
      this.term.onData((d) => input.data(d));
      this.term.onBinary((d) => input.data(d));
      this.term.onResize(({ cols, rows }) => input.resize(cols, rows));
    }
    this.resize();
  }

  /** write shows an output frame. */
  write(f: Frame): void {
    const bytes = outputBytes(f);
    if (f.kind === "stderr" && !this.tty && f.encoding !== "base64" && !bytes.includes(0x1b)) {
      this.term.write(stderrOn);
      this.term.write(bytes);
      this.term.write(stderrOff);
      return;
    }
    this.term.write(bytes);
  }

  /** note writes a dim line of the page's own (not the step's output). */
  note(text: string): void {
    this.term.write(`\r\n\x1b[2m${text}\x1b[22m\r\n`);
  }

  /** resize fits the terminal to its container, when it is shown. */
  resize(): void {
    if (this.container.offsetParent === null) return;
    try {
      this.fit.fit();
    } catch {
      // Not measurable yet (no layout); the next resize fits it.
    }
  }

  get cols(): number {
    return this.term.cols;
  }

  get rows(): number {
    return this.term.rows;
  }

  focus(): void {
    this.term.focus();
  }

  /**
   * text returns the buffer as a string: one line per terminal line, lines
   * that wrapped joined back, trailing blanks trimmed.
   */
  text(): string {
    const buf = this.term.buffer.active;
    const lines: string[] = [];
    for (let i = 0; i < buf.length; i++) {
      const line = buf.getLine(i);
      if (!line) continue;
      const next = buf.getLine(i + 1);
      const s = line.translateToString(!next?.isWrapped);
      if (line.isWrapped && lines.length > 0) lines[lines.length - 1] += s;
      else lines.push(s);
    }
    while (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
    return lines.join("\n");
  }

  dispose(): void {
    this.term.dispose();
  }
}
