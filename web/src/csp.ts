// Making xterm.js work under a strict Content-Security-Policy.
//
// The page is served with "default-src 'self'", which forbids inline styles:
// <style> elements (even empty ones) and style="" attributes. xterm's DOM
// renderer uses both: it appends <style> elements to the terminal and
// writes its theme (the ANSI colour classes), row metrics and scrollbar
// colours into them, and sets true-colour cells with
// setAttribute("style", ...). Blocked, the terminal would show no colours
// and the console would fill with violations. CSSOM is not subject to
// style-src, so this shim routes both through it:
//
//   - a <style> appended inside an .xterm element is kept out of the
//     document; text assigned to it goes into a constructed CSSStyleSheet
//     adopted by the document instead;
//   - setAttribute("style", v) on an HTML element becomes style.cssText = v.
//
// install() must run before the first Terminal is opened; prune() after
// terminals are disposed releases their sheets.

interface Shadow {
  // parent is the element xterm appended the <style> to; the sheet lives
  // as long as parent is in the document.
  parent: Element;
  sheet: CSSStyleSheet;
}

const nodeTextContent = Object.getOwnPropertyDescriptor(Node.prototype, "textContent")!;
const shadows = new Map<HTMLStyleElement, Shadow>();
let installed = false;

/** install patches the three DOM entry points (idempotent). */
export function install(): void {
  if (installed) return;
  installed = true;

  const appendChild = Node.prototype.appendChild;
  Node.prototype.appendChild = function <T extends Node>(this: Node, child: T): T {
    if (child instanceof HTMLStyleElement && this instanceof Element && this.closest(".xterm")) {
      if (!shadows.has(child)) {
        const sheet = new CSSStyleSheet();
        sheet.replaceSync(nodeTextContent.get!.call(child) ?? "");
        shadows.set(child, { parent: this, sheet });
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      }
      return child;
    }
    return appendChild.call(this, child) as T;
  };

  Object.defineProperty(HTMLStyleElement.prototype, "textContent", {
    configurable: true,
    enumerable: nodeTextContent.enumerable,
    get(this: HTMLStyleElement): string | null {
      const s = shadows.get(this);
      if (s) return Array.from(s.sheet.cssRules, (r) => r.cssText).join("\n");
      return nodeTextContent.get!.call(this);
    },
    set(this: HTMLStyleElement, v: string | null): void {
      const s = shadows.get(this);
      if (s) s.sheet.replaceSync(v ?? "");
      else nodeTextContent.set!.call(this, v);
    },
  });

  const setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (this: Element, name: string, value: string): void {
    if (name.toLowerCase() === "style" && this instanceof HTMLElement) {
      this.style.cssText = value;
      return;
    }
    setAttribute.call(this, name, value);
  };
}

/** prune drops the sheets of terminals no longer in the document. */
export function prune(): void {
  const gone = new Set<CSSStyleSheet>();
  for (const [el, s] of shadows) {
    if (s.parent.isConnected) continue;
    shadows.delete(el);
    gone.add(s.sheet);
  }
  if (gone.size > 0) document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !gone.has(s));
}
