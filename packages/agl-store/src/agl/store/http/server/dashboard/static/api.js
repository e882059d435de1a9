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
