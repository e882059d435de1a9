// Every read goes through the store's public /v1/agl routes, with the token from sessionStorage.
export const TOKEN_KEY = "agl.store.token";
export const API = "/v1/agl";

export class AuthError extends Error {}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function query(params) {
  const qs = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) value.forEach((v) => qs.append(key, String(v)));
    else qs.append(key, String(value));
  }
  const text = qs.toString();
  return text ? "?" + text : "";
}

export async function get(path, params, token = getToken()) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(API + path + query(params), { headers, cache: "no-store" });
  if (resp.status === 401) throw new AuthError((await resp.json().catch(() => ({}))).detail || "unauthorised");
  if (!resp.ok) {
    const body = await resp.json().catch(() => ({}));
    throw new Error(`${resp.status} ${body.detail || resp.statusText}`);
  }
  return resp.json();
}

const enc = encodeURIComponent;

export const store = {
  statistics: () => get("/statistics"),
  rollouts: (params) => get("/rollouts", params),
  rollout: (id) => get(`/rollouts/${enc(id)}`),
  attempts: (id) => get(`/rollouts/${enc(id)}/attempts`, { sort_by: "sequence_id", sort_order: "asc" }),
  spans: (params) => get("/spans", params),
  resources: (params) => get("/resources", params),
  workers: (params) => get("/workers", params),
};

/** Every page of a paginated route (for views that need all rows, e.g. the training charts). */
export async function all(fetchPage, params, pageSize = 1000, max = 20000) {
  const items = [];
  let offset = 0;
  for (;;) {
    const page = await fetchPage({ ...params, limit: pageSize, offset });
    items.push(...page.items);
    offset += page.items.length;
    if (page.items.length < pageSize || offset >= page.total || offset >= max) return { items, total: page.total };
  }
}

/** The algorithm's latest figures, from the gauges of agl.algorithms.metrics on the store's Prometheus /metrics
 * (present when the algorithm runs in the store's process, as under the Trainer): [{algorithm, kind, name, value}]. */
export async function algorithmFigures(token = getToken()) {
  const headers = {};
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch("/metrics", { headers, cache: "no-store" });
  return resp.ok ? parseAlgorithmGauges(await resp.text()) : [];
}

const GAUGE = /^agl_algorithm_([A-Za-z0-9_]+)\{([^}]*)\}\s+(\S+)$/;
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;
const COUNTER_SERIES = new Set(["records_total", "records_created"]);

/** The agl_algorithm_* gauges of a Prometheus text exposition (the records counter left out). */
export function parseAlgorithmGauges(text) {
  const figures = [];
  for (const line of text.split("\n")) {
    const m = GAUGE.exec(line.trim());
    if (!m || COUNTER_SERIES.has(m[1])) continue;
    const labels = Object.fromEntries([...m[2].matchAll(LABEL)].map(([, key, value]) => [key, value]));
    figures.push({ algorithm: labels.algorithm ?? "", kind: labels.kind ?? "", name: m[1], value: Number(m[3]) });
  }
  return figures;
}
