// Validate Mermaid text with mermaid's own parser (mermaid.parse), under jsdom.
// Usage: node check.mjs FILE   (or - for stdin). Exit 0 = valid, 1 = parse error, 2 = setup error.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const src = readFileSync(process.argv[2] === "-" || !process.argv[2] ? 0 : process.argv[2], "utf8");
const dom = new JSDOM("<!doctype html><html><body></body></html>", { pretendToBeVisual: true });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
for (const k of ["DOMParser", "Element", "HTMLElement", "SVGElement", "Node", "navigator"]) {
  if (!(k in globalThis)) {
    try { globalThis[k] = dom.window[k]; } catch { /* read-only in this node version */ }
  }
}
let mermaid;
try {
  mermaid = (await import("mermaid")).default;
  mermaid.initialize({ startOnLoad: false });
} catch (e) {
  console.error("setup: " + e.message);
  process.exit(2);
}
try {
  const r = await mermaid.parse(src);
  console.log(JSON.stringify({ valid: true, diagramType: r.diagramType }));
} catch (e) {
  console.log(JSON.stringify({ valid: false, error: String(e.message || e).split("\n").slice(0, 4).join(" ") }));
  process.exit(1);
}
