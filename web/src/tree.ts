// The file tree of a revision, built from its flat list of entries (a
// directory is listed only when empty: the others are implied by their
// files). Directories open on demand, so a tree of 100,000 files costs
// only what is opened.

import type { TreeEntry } from "./api";
import { h, replace } from "./dom";
import { bytes, printable } from "./format";

/** TreeNode is a directory (children) or a file or symlink (entry). */
export interface TreeNode {
  name: string;
  path: string;
  type: string;
  entry?: TreeEntry;
  children?: Map<string, TreeNode>;
}

/** buildTree turns the entries into a tree under a root directory (path ""). */
export function buildTree(entries: TreeEntry[]): TreeNode {
  const root: TreeNode = { name: "", path: "", type: "dir", children: new Map() };
  for (const e of entries) {
    const parts = e.path.split("/").filter(Boolean);
    let dir = root;
    for (let i = 0; i < parts.length; i++) {
      const last = i === parts.length - 1;
      const path = parts.slice(0, i + 1).join("/");
      let node = dir.children!.get(parts[i]);
      if (!node) {
        node = { name: parts[i], path, type: last ? e.type : "dir" };
        if (node.type === "dir") node.children = new Map();
        dir.children!.set(parts[i], node);
      }
      if (last) {
        node.entry = e;
        if (e.type === "dir") node.children ??= new Map();
      }
      if (!node.children) break; // a file named as a directory: keep the file
      dir = node;
    }
  }
  return root;
}

/** findNode is the node at path, or undefined. */
export function findNode(root: TreeNode, path: string): TreeNode | undefined {
  let node: TreeNode | undefined = root;
  for (const part of path.split("/").filter(Boolean)) {
    node = node?.children?.get(part);
    if (!node) return undefined;
  }
  return node;
}

function sorted(dir: TreeNode): TreeNode[] {
  // Directories first, then by name.
  return [...dir.children!.values()].sort((a, b) => Number(!!b.children) - Number(!!a.children) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * renderTree draws root in list; choose is called with the node clicked.
 * open names the paths to show opened (the selected file's directories).
 */
export function renderTree(list: HTMLElement, root: TreeNode, choose: (n: TreeNode) => void, open: Set<string>): void {
  const item = (n: TreeNode): HTMLElement => {
    if (n.children) {
      const kids = h("ul", { class: "tree" });
      const summary = h("summary", { "data-path": n.path, "data-type": "dir" }, h("span", { class: "tree-name" }, printable(n.name) + "/"));
      const details = h("details", {}, summary, kids);
      let drawn = false;
      const draw = () => {
        if (drawn) return;
        drawn = true;
        replace(kids, n.children!.size === 0 ? h("li", { class: "muted" }, "empty") : sorted(n).map(item));
      };
      details.addEventListener("toggle", () => {
        if (details.open) draw();
      });
      summary.addEventListener("click", () => choose(n));
      if (open.has(n.path)) {
        details.open = true;
        draw();
      }
      return h("li", { "data-testid": "tree-item", "data-path": n.path, "data-type": "dir" }, details);
    }
    const button = h(
      "button",
      { type: "button", class: "tree-file", "data-path": n.path, "data-type": n.type, title: printable(n.path) },
      h("span", { class: "tree-name" }, printable(n.name)),
      n.type === "symlink" ? h("span", { class: "muted" }, " \u2192 " + printable(n.entry?.target ?? "")) : h("span", { class: "muted tree-size" }, bytes(n.entry?.size)),
    );
    button.addEventListener("click", () => choose(n));
    return h("li", { "data-testid": "tree-item", "data-path": n.path, "data-type": n.type }, button);
  };
  replace(list, root.children!.size === 0 ? h("li", { class: "muted", id: "ws-tree-empty" }, "No files yet.") : sorted(root).map(item));
}

/** parents are the directories above path ("a/b/c" -> "a", "a/b"). */
export function parents(path: string): string[] {
  const parts = path.split("/").filter(Boolean);
  return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join("/"));
}
