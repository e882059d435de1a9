// The training view: counts, rollouts finished per minute, mean reward over time and per resources version, and
// the algorithm's latest figures when it reports them to the store's /metrics.
import { algorithmSection } from "./algorithm.js";
import { algorithmFigures, all, store } from "./api.js";
import { barChart, lineChart } from "./charts.js";
import { STATUSES } from "./rollouts.js";
import { finalReward, h, num, time } from "./util.js";

export const RECENT = 2000;

export async function render() {
  const [stats, counts, finished, resources, figures] = await Promise.all([
    store.statistics(),
    Promise.all(STATUSES.map((st) => store.rollouts({ status_in: st, limit: 0 }).then((p) => [st, p.total]))),
    all(store.rollouts, { status_in: ["succeeded", "failed", "cancelled"], sort_by: "end_time", sort_order: "desc" }, 1000, RECENT),
    all(store.resources, { sort_by: "create_time", sort_order: "asc" }, 500, 5000),
    algorithmFigures().catch(() => []),
  ]);
  const rows = finished.items.filter((r) => typeof r.end_time === "number");
  const perMinute = new Map();
  const rewardPerMinute = new Map();
  const perVersion = new Map();
  for (const r of rows) {
    const minute = Math.floor(r.end_time / 60) * 60;
    perMinute.set(minute, (perMinute.get(minute) || 0) + 1);
    const reward = finalReward(r);
    if (reward === null) continue;
    const m = rewardPerMinute.get(minute) || { sum: 0, n: 0 };
    m.sum += reward;
    m.n += 1;
    rewardPerMinute.set(minute, m);
    const key = r.resources_id || "(none)";
    const v = perVersion.get(key) || { sum: 0, n: 0 };
    v.sum += reward;
    v.n += 1;
    perVersion.set(key, v);
  }
  const order = new Map(resources.items.map((r, i) => [r.resources_id, i]));
  const versions = [...perVersion.entries()].sort((a, b) => (order.get(a[0]) ?? 1e9) - (order.get(b[0]) ?? 1e9));
  const minuteLabel = (t) => time(t).slice(11, 16);
  const throughput = [...perMinute.entries()].sort((a, b) => a[0] - b[0]).map(([x, y]) => ({ x, y }));
  const rewardCurve = [...rewardPerMinute.entries()].sort((a, b) => a[0] - b[0]).map(([x, m]) => ({ x, y: m.sum / m.n }));
  const byStatus = Object.fromEntries(counts);
  const card = (label, value, testid) => h("div", { class: "card" }, h("div", { class: "muted" }, label), h("div", { class: "v", "data-testid": testid }, value));
  return h(
    "div",
    {},
    h("h2", {}, "Training"),
    h(
      "div",
      { class: "cards" },
      card("rollouts", stats.total_rollouts ?? "", "total-rollouts"),
      card("attempts", stats.total_attempts ?? "", "total-attempts"),
      card("spans", stats.total_spans ?? "", "total-spans"),
      card("resources versions", stats.total_resources ?? "", "total-resources"),
      card("workers", stats.total_workers ?? "", "total-workers"),
      STATUSES.map((st) => card(st, byStatus[st], `count-${st}`)),
    ),
    algorithmSection(figures),
    h("p", { class: "muted" }, `Charts over the ${rows.length} most recently finished rollouts${finished.total > rows.length ? ` (of ${finished.total})` : ""}.`),
    h(
      "div",
      { class: "grid2" },
      lineChart("Rollouts finished per minute", throughput, { xFormat: minuteLabel, testid: "chart-throughput", xPad: 60 }),
      lineChart("Mean final reward per minute", rewardCurve, { xFormat: minuteLabel, testid: "chart-reward", xPad: 60 }),
      barChart("Mean final reward per resources version", versions.map(([label, v]) => ({ label, value: v.sum / v.n })), { testid: "chart-versions" }),
      h(
        "div",
        {},
        h("h3", {}, "Per resources version"),
        h("table", { id: "versions-table" }, h("thead", {}, h("tr", {}, h("th", {}, "resources"), h("th", {}, "rollouts with a reward"), h("th", {}, "mean reward"))), h("tbody", {}, versions.map(([label, v]) => h("tr", { "data-resources-id": label }, h("td", { class: "mono" }, label), h("td", { class: "num" }, v.n), h("td", { class: "num" }, num(v.sum / v.n)))))),
      ),
    ),
  );
}
