// The training page's algorithm section: the latest figures the algorithm reported (agl.algorithms.metrics),
// with the off-policy ones of asynchronous training first: staleness, importance ratios, clipping, drops.
import { barChart } from "./charts.js";
import { h, num } from "./util.js";

const HEADLINE = [
  ["staleness_max", "max staleness (versions)"],
  ["is_ratio_mean", "importance ratio, mean"],
  ["is_ratio_max", "importance ratio, max"],
  ["clip_fraction", "clipped fraction"],
  ["dropped_samples", "samples dropped as stale"],
];
const STALENESS = /^staleness_(\d+)$/;

/** The section for `figures` (from api.algorithmFigures); null when no algorithm reports any here. */
export function algorithmSection(figures) {
  if (!figures.length) return null;
  const algorithms = [...new Set(figures.filter((f) => f.kind === "train").map((f) => f.algorithm))].sort();
  const rows = [...figures].sort((a, b) => a.algorithm.localeCompare(b.algorithm) || a.kind.localeCompare(b.kind) || a.name.localeCompare(b.name));
  return h(
    "div",
    { id: "algorithm-figures" },
    h("h3", {}, "Algorithm (latest step)"),
    algorithms.map((algorithm) => trainingFigures(algorithm, figures)),
    h(
      "details",
      {},
      h("summary", {}, `All ${rows.length} figures`),
      h(
        "table",
        { id: "algorithm-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "algorithm"), h("th", {}, "kind"), h("th", {}, "figure"), h("th", {}, "value"))),
        h("tbody", {}, rows.map((f) => h("tr", { "data-figure": `${f.algorithm}.${f.kind}.${f.name}` }, h("td", {}, f.algorithm), h("td", {}, f.kind), h("td", { class: "mono" }, f.name), h("td", { class: "num" }, num(f.value))))),
      ),
    ),
  );
}

/** One algorithm's headline training figures and its staleness histogram. */
function trainingFigures(algorithm, figures) {
  const train = new Map(figures.filter((f) => f.algorithm === algorithm && f.kind === "train").map((f) => [f.name, f.value]));
  const cards = HEADLINE.filter(([name]) => train.has(name)).map(([name, label]) =>
    h("div", { class: "card" }, h("div", { class: "muted" }, label), h("div", { class: "v", "data-testid": `algo-${name}` }, num(train.get(name)))),
  );
  const lags = [...train.entries()]
    .map(([name, value]) => [STALENESS.exec(name), value])
    .filter(([m]) => m)
    .map(([m, value]) => ({ label: m[1], value }))
    .sort((a, b) => Number(a.label) - Number(b.label));
  if (!cards.length && !lags.length) return null;
  return h(
    "div",
    { class: "algorithm", "data-algorithm": algorithm },
    h("h4", {}, algorithm),
    cards.length ? h("div", { class: "cards" }, cards) : null,
    lags.length ? barChart("Samples of the last batch, by versions behind", lags, { testid: "chart-staleness" }) : null,
  );
}
