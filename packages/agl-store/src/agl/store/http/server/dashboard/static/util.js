// Small DOM and formatting helpers: every value goes into the page as text, never parsed as HTML.
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export const svgNS = "http://www.w3.org/2000/svg";
export function s(tag, attrs, ...children) {
  const node = document.createElementNS(svgNS, tag);
  for (const [key, value] of Object.entries(attrs || {})) if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  for (const child of children.flat()) if (child !== undefined && child !== null) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

export function time(epoch) {
  if (epoch === undefined || epoch === null) return "";
  const d = new Date(epoch * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function duration(start, end) {
  if (start === undefined || start === null || end === undefined || end === null) return "";
  return seconds(end - start);
}

export function seconds(value) {
  if (value === undefined || value === null || Number.isNaN(value)) return "";
  if (value < 1) return `${(value * 1000).toFixed(0)} ms`;
  if (value < 120) return `${value.toFixed(2)} s`;
  return `${(value / 60).toFixed(1)} min`;
}

export function num(value, digits = 4) {
  if (value === undefined || value === null || typeof value !== "number") return "";
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(digits)));
}

export function status(value) {
  return h("span", { class: `status ${value || ""}` }, value || "");
}

export function json(value) {
  return h("pre", {}, typeof value === "string" ? value : JSON.stringify(value, null, 2));
}

export function parseJSON(text) {
  if (typeof text !== "string") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export function finalReward(rollout) {
  const value = rollout && rollout.attempt && rollout.attempt.metadata ? rollout.attempt.metadata.final_reward : undefined;
  return typeof value === "number" ? value : null;
}

export function table(columns, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => (c instanceof Node ? c : h("th", {}, c))))),
    h("tbody", {}, rows),
  );
}

/** Hash routes: "#/rollouts?status=failed" → { path: ["rollouts"], params: URLSearchParams }. */
export function parseHash(hash) {
  const text = (hash || "").replace(/^#\/?/, "");
  const [path, qs] = text.split("?", 2);
  return { path: path ? path.split("/").map(decodeURIComponent) : [], params: new URLSearchParams(qs || "") };
}

const SECRET_KEY = /api[-_]?key|token|secret|passw(or)?d|authorization|credential|(^|[-_.])key$/i;
const HIDDEN = "••••••";
const MASK_DEPTH = 32; // deeper than any real resource: what lies below is hidden, not walked

/** A resource (or any JSON value) with its secrets hidden at every depth, in objects and arrays alike. */
export function masked(value, depth = 0) {
  if (value === null || typeof value !== "object") return value;
  if (depth >= MASK_DEPTH) return HIDDEN;
  if (Array.isArray(value)) return value.map((item) => masked(item, depth + 1));
  // fromEntries defines own properties: a "__proto__" key stays a key.
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, isSecret(key, item) ? HIDDEN : masked(item, depth + 1)]));
}

/** Numbers and flags are no secrets: max_tokens stays readable. */
function isSecret(key, value) {
  return SECRET_KEY.test(key) && Boolean(value) && typeof value !== "number" && typeof value !== "boolean";
}
