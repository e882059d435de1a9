// The rollouts table: filter by status, mode and id, sort, paginate; all server-side through GET /rollouts.
import { store } from "./api.js";
import { duration, finalReward, h, num, status, table, time } from "./util.js";

export const STATUSES = ["queuing", "preparing", "running", "requeuing", "succeeded", "failed", "cancelled"];
const SORTABLE = { rollout_id: "id", status: "status", mode: "mode", start_time: "start", end_time: "end", resources_id: "resources" };
export const MODES = ["train", "val", "test"];
export const PAGE_SIZE = 50;

function link(params, changes) {
  const next = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === "") next.delete(k);
    else next.set(k, v);
  }
  return "#/rollouts?" + next.toString();
}

export async function render({ params, go }) {
  const page = Math.max(1, Number(params.get("page") || 1));
  const sortBy = params.get("sort") || "start_time";
  const order = params.get("order") || "desc";
  const statusFilter = params.get("status") || "";
  const modeFilter = params.get("mode") || "";
  const idFilter = params.get("id") || "";
  const result = await store.rollouts({
    status_in: statusFilter ? statusFilter.split(",") : undefined,
    mode_in: modeFilter ? modeFilter.split(",") : undefined,
    rollout_id_contains: idFilter || undefined,
    sort_by: sortBy,
    sort_order: order,
    limit: PAGE_SIZE,
    offset: (page - 1) * PAGE_SIZE,
  });

  const select = h(
    "select",
    { id: "status-filter", "aria-label": "status", onchange: (e) => go(link(params, { status: e.target.value, page: null })) },
    h("option", { value: "" }, "any status"),
    STATUSES.map((st) => h("option", { value: st, selected: st === statusFilter }, st)),
  );
  const modeSelect = h(
    "select",
    { id: "mode-filter", "aria-label": "mode", onchange: (e) => go(link(params, { mode: e.target.value, page: null })) },
    h("option", { value: "" }, "any mode"),
    MODES.map((m) => h("option", { value: m, selected: m === modeFilter }, m)),
  );
  const search = h("input", { id: "id-filter", type: "search", placeholder: "rollout id contains", value: idFilter });
  search.addEventListener("change", () => go(link(params, { id: search.value.trim(), page: null })));

  const header = (field, label) => {
    if (!(field in SORTABLE)) return h("th", {}, label);
    const sorted = field === sortBy;
    const nextOrder = sorted && order === "asc" ? "desc" : "asc";
    return h(
      "th",
      { class: `sortable ${sorted ? "sorted" : ""}`, "data-sort": field, "data-dir": sorted ? (order === "asc" ? "▲" : "▼") : null, onclick: () => go(link(params, { sort: field, order: nextOrder, page: null })) },
      label,
    );
  };
  const rows = result.items.map((r) => {
    const reward = finalReward(r);
    return h(
      "tr",
      { "data-rollout-id": r.rollout_id },
      h("td", { class: "mono" }, h("a", { href: `#/rollout/${encodeURIComponent(r.rollout_id)}` }, r.rollout_id)),
      h("td", { "data-col": "status" }, status(r.status)),
      h("td", { "data-col": "mode" }, r.mode || ""),
      h("td", { class: "num", "data-col": "attempts" }, r.attempt ? r.attempt.sequence_id : 0),
      h("td", { "data-col": "start" }, time(r.start_time)),
      h("td", { "data-col": "end" }, time(r.end_time)),
      h("td", { class: "num", "data-col": "duration" }, duration(r.start_time, r.end_time)),
      h("td", { class: "num", "data-col": "reward" }, reward === null ? "" : num(reward)),
      h("td", { class: "mono", "data-col": "resources" }, r.resources_id || ""),
    );
  });
  const last = Math.max(1, Math.ceil(result.total / PAGE_SIZE));
  const from = result.total ? (page - 1) * PAGE_SIZE + 1 : 0;
  const to = (page - 1) * PAGE_SIZE + result.items.length;
  return h(
    "div",
    {},
    h("h2", {}, "Rollouts"),
    h("div", { class: "toolbar" }, select, modeSelect, search),
    table(
      [header("rollout_id", "rollout"), header("status", "status"), header("mode", "mode"), h("th", {}, "attempts"), header("start_time", "start"), header("end_time", "end"), h("th", {}, "duration"), h("th", {}, "final reward"), header("resources_id", "resources")],
      rows,
      { id: "rollouts-table" },
    ),
    h(
      "div",
      { class: "pager" },
      h("button", { id: "prev", disabled: page <= 1, onclick: () => go(link(params, { page: String(page - 1) })) }, "‹ prev"),
      h("span", { id: "range", "data-total": result.total }, `${from}–${to} of ${result.total}`),
      h("button", { id: "next", disabled: page >= last, onclick: () => go(link(params, { page: String(page + 1) })) }, "next ›"),
    ),
  );
}
