// Small DOM helpers. The page builds its elements with h() and never uses
// innerHTML, inline handlers or style attributes, so a strict CSP holds.

type AttrValue = string | number | boolean | null | undefined;
export type Child = Node | string | number | null | undefined | false;

/**
 * h creates an element with attributes and children. An attribute whose
 * value is false, null or undefined is left out; true sets it empty.
 * "class" sets the class list. Strings become text nodes (never HTML).
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, AttrValue> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === "style") throw new Error("h: style attributes break the CSP; use a class");
    el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, ...children);
  return el;
}

/** append adds children (nodes or text) to el. */
export function append(el: Node, ...children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** replace sets el's children to the given ones. */
export function replace(el: Node, ...children: (Child | Child[])[]): void {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, ...children);
}

/** byId returns the element with the id or throws: a missing id is a bug. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`no element #${id}`);
  return el as T;
}

/** setText changes el's text only when it differs, so tests and screen readers see no churn. */
export function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}
