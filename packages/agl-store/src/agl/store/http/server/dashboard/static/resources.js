// Resources: every version, its prompt templates, and a line diff of a template between two versions.
import { all, store } from "./api.js";
import { lineDiff } from "./diff.js";
import { h, json, masked, table, time } from "./util.js";

export async function render({ params, go }) {
  const { items, total } = await all(store.resources, { sort_by: "create_time", sort_order: "desc" }, 500, 5000);
  if (!items.length) return h("div", {}, h("h2", {}, "Resources"), h("p", { class: "muted" }, "No resources yet."));
  const ids = items.map((r) => r.resources_id);
  const a = params.get("a") && ids.includes(params.get("a")) ? params.get("a") : ids[Math.min(1, ids.length - 1)];
  const b = params.get("b") && ids.includes(params.get("b")) ? params.get("b") : ids[0];
  const shown = params.get("show") && ids.includes(params.get("show")) ? params.get("show") : ids[0];
  const byId = new Map(items.map((r) => [r.resources_id, r]));
  const nav = (changes) => {
    const next = new URLSearchParams(params);
    for (const [k, v] of Object.entries(changes)) next.set(k, v);
    go("#/resources?" + next.toString());
  };
  const rows = items.map((r) =>
    h(
      "tr",
      { "data-resources-id": r.resources_id, class: r.resources_id === shown ? "selected" : null },
      h("td", { class: "mono" }, h("a", { href: "#", onclick: (e) => (e.preventDefault(), nav({ show: r.resources_id })) }, r.resources_id)),
      h("td", { class: "num", "data-col": "version" }, r.version),
      h("td", {}, time(r.create_time)),
      h("td", {}, time(r.update_time)),
      h("td", {}, Object.entries(r.resources).map(([name, res]) => `${name} (${res.resource_type})`).join(", ")),
    ),
  );
  const picker = (id, value, key) =>
    h("select", { id, onchange: (e) => nav({ [key]: e.target.value }) }, ids.map((x) => h("option", { value: x, selected: x === value }, `${x} (v${byId.get(x).version})`)));
  return h(
    "div",
    {},
    h("h2", {}, `Resources (${total} versions)`),
    table(["resources", "version", "created", "updated", "named resources"].map((c) => h("th", {}, c)), rows, { id: "resources-table" }),
    h("h3", {}, "Version ", h("span", { class: "mono", id: "shown-resources" }, shown)),
    detail(byId.get(shown)),
    h("h3", {}, "Prompt template differences"),
    h("div", { class: "toolbar" }, "from ", picker("diff-a", a, "a"), " to ", picker("diff-b", b, "b")),
    diffs(byId.get(a), byId.get(b)),
  );
}

function detail(update) {
  return h(
    "div",
    { id: "resources-detail" },
    Object.entries(update.resources).map(([name, res]) =>
      h("div", { "data-resource-name": name }, h("div", {}, h("b", {}, name), ` · ${res.resource_type}`), res.resource_type === "prompt_template" ? h("pre", { class: "template" }, res.template) : json(masked(res))),
    ),
  );
}

function templates(update) {
  const out = {};
  for (const [name, res] of Object.entries(update.resources)) if (res.resource_type === "prompt_template") out[name] = res.template;
  return out;
}

function diffs(a, b) {
  const ta = templates(a);
  const tb = templates(b);
  const names = [...new Set([...Object.keys(ta), ...Object.keys(tb)])].sort();
  if (!names.length) return h("p", { class: "muted" }, "No prompt templates in these versions.");
  return h(
    "div",
    { id: "template-diff" },
    names.map((name) => h("div", { class: "diff", "data-template": name }, h("div", {}, h("b", {}, name)), lineDiff(ta[name] ?? "", tb[name] ?? "").map(([op, line]) => h("div", { class: op === "+" ? "add" : op === "-" ? "del" : "" }, `${op} ${line}`)))),
  );
}
