// Workers: status, current rollout and attempt, heartbeat age.
import { store } from "./api.js";
import { h, json, seconds, status, table } from "./util.js";

function summary(stats) {
  const parts = [];
  if (stats.host) parts.push(String(stats.host));
  if (typeof stats.cpu_usage_pct === "number") parts.push(`cpu ${stats.cpu_usage_pct}%`);
  if (typeof stats.mem_pct === "number") parts.push(`mem ${stats.mem_pct}%`);
  return parts.length ? parts.join(" · ") : `${Object.keys(stats).length} fields`;
}

export async function render() {
  const result = await store.workers({ sort_by: "worker_id", sort_order: "asc" });
  const now = Date.now() / 1000;
  const rows = result.items.map((w) =>
    h(
      "tr",
      { "data-worker-id": w.worker_id },
      h("td", { class: "mono" }, w.worker_id),
      h("td", {}, status(w.status)),
      h("td", { class: "mono" }, w.current_rollout_id ? h("a", { href: `#/rollout/${encodeURIComponent(w.current_rollout_id)}` }, w.current_rollout_id) : ""),
      h("td", { class: "mono" }, w.current_attempt_id || ""),
      h("td", { class: "num", "data-col": "heartbeat-age" }, w.last_heartbeat_time ? seconds(Math.max(0, now - w.last_heartbeat_time)) : "never"),
      h("td", {}, w.heartbeat_stats ? h("details", {}, h("summary", {}, summary(w.heartbeat_stats)), json(w.heartbeat_stats)) : ""),
    ),
  );
  return h(
    "div",
    {},
    h("h2", {}, `Workers (${result.total})`),
    result.items.length
      ? table(["worker", "status", "current rollout", "current attempt", "heartbeat age", "heartbeat stats"].map((c) => h("th", {}, c)), rows, { id: "workers-table" })
      : h("p", { class: "muted" }, "No workers have reported yet."),
  );
}
