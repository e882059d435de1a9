// One rollout: attempts, span timeline, span tree, LLM calls, rewards and annotations.
import { store } from "./api.js";
import { ANNOTATION, LLM_CALL, isLlmCall, llmCall, rewards, spanTree } from "./spans.js";
import { duration, finalReward, h, json, num, s, seconds, status, table, time } from "./util.js";

export const MAX_SPANS = 5000;
const FINISHED = new Set(["succeeded", "failed", "cancelled"]);

export async function render({ path }) {
  const id = path[1];
  const [rollout, attempts, spans] = await Promise.all([
    store.rollout(id),
    store.attempts(id),
    store.spans({ rollout_id: id, sort_by: "sequence_id", sort_order: "asc", limit: MAX_SPANS }),
  ]);
  if (!rollout) return h("div", {}, h("h2", {}, "Rollout not found"), h("p", {}, `No rollout with id ${id}.`));
  const items = spans.items;
  const rewardRows = [];
  for (const sp of items) for (const r of rewards(sp)) rewardRows.push({ span: sp, ...r });
  // As agl.tracer.find_final_reward: the primary reward of the last span that carries one.
  const primaries = items.map((sp) => rewards(sp)[0]).filter(Boolean);
  const final = finalReward(rollout) ?? (primaries.length ? primaries.at(-1).value : null);
  // The proxy's records (token ids, usage) when there are any; else what the client-side tracer saw.
  const proxied = items.filter((sp) => sp.name === LLM_CALL);
  const llm = proxied.length ? proxied : items.filter(isLlmCall);
  // emit_reward writes annotation spans too: those are listed under rewards.
  const annotations = items.filter((sp) => sp.name === ANNOTATION && !rewards(sp).length);
  const node = h(
    "div",
    { "data-finished": FINISHED.has(rollout.status) ? "true" : "false" },
    h("p", {}, h("a", { href: "#/rollouts" }, "‹ rollouts")),
    h("h2", {}, "Rollout ", h("span", { class: "mono", id: "rollout-id" }, rollout.rollout_id)),
    noTrainingData(rollout),
    h(
      "div",
      { class: "cards" },
      card("status", status(rollout.status), "status"),
      card("mode", rollout.mode || "—", "mode"),
      card("attempts", attempts.total, "attempt-count"),
      card("spans", spans.total, "span-count"),
      card("final reward", final === null ? "—" : num(final), "final-reward"),
      card("duration", duration(rollout.start_time, rollout.end_time) || "—", "duration"),
      card("resources", rollout.resources_id || "—", "resources-id"),
    ),
    h("h3", {}, "Input"),
    json(rollout.input),
    h("h3", {}, "Attempts"),
    table(
      ["#", "attempt", "status", "worker", "start", "end", "duration", "last heartbeat"].map((c) => h("th", {}, c)),
      attempts.items.map((a) =>
        h("tr", { "data-attempt-id": a.attempt_id }, h("td", { class: "num" }, a.sequence_id), h("td", { class: "mono" }, a.attempt_id), h("td", {}, status(a.status)), h("td", { class: "mono" }, a.worker_id || ""), h("td", {}, time(a.start_time)), h("td", {}, time(a.end_time)), h("td", { class: "num" }, duration(a.start_time, a.end_time)), h("td", {}, time(a.last_heartbeat_time))),
      ),
      { id: "attempts-table" },
    ),
    h("h3", {}, `Timeline (${spans.total} spans${spans.total > items.length ? `, first ${items.length} shown` : ""})`),
    timeline(items),
    h("h3", {}, "Span tree"),
    tree(items),
    h("h3", {}, `LLM calls (${llm.length})`),
    llm.length ? h("div", { id: "llm-calls" }, llm.map(llmCard)) : h("p", { class: "muted" }, "No LLM calls recorded."),
    h("h3", {}, `Rewards (${rewardRows.length})`),
    rewardRows.length
      ? table(["seq", "span", "dimension", "value"].map((c) => h("th", {}, c)), rewardRows.map((r) => h("tr", {}, h("td", { class: "num" }, r.span.sequence_id), h("td", {}, r.span.name), h("td", {}, r.name), h("td", { class: "num" }, num(r.value)))), { id: "rewards-table" })
      : h("p", { class: "muted" }, "No rewards."),
    h("h3", {}, `Annotations (${annotations.length})`),
    annotations.length ? h("div", { id: "annotations" }, annotations.map((sp) => h("div", { "data-span-id": sp.span_id }, h("div", { class: "muted" }, `#${sp.sequence_id} ${time(sp.start_time)}`), json(sp.attributes)))) : h("p", { class: "muted" }, "No annotations."),
  );
  node.refreshable = !FINISHED.has(rollout.status);
  return node;
}

// An algorithm notes in the rollout's metadata why it gave no training data (agl.algorithms.adapter.mark_no_data).
function noTrainingData(rollout) {
  const noted = rollout.metadata && rollout.metadata.no_training_data;
  if (!noted || typeof noted !== "object") return null;
  return h(
    "div",
    { class: "notice", id: "no-training-data" },
    h("div", {}, h("strong", {}, "No training data: "), String(noted.reason ?? "unknown")),
    noted.fix ? h("div", { class: "muted" }, "Fix: ", String(noted.fix)) : null,
  );
}

function card(label, value, testid) {
  return h("div", { class: "card" }, h("div", { class: "muted" }, label), h("div", { class: "v", "data-testid": testid }, value));
}

function timeline(spans) {
  if (!spans.length) return h("p", { class: "muted" }, "No spans.");
  const W = 900;
  const labelled = spans.length <= 60;
  const ROW = labelled ? 16 : 7;
  const LEFT = labelled ? 220 : 4;
  const t0 = Math.min(...spans.map((sp) => sp.start_time));
  const t1 = Math.max(...spans.map((sp) => sp.end_time ?? sp.start_time));
  const span = Math.max(t1 - t0, 1e-6);
  const height = spans.length * ROW + 20;
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, id: "timeline", role: "img", "aria-label": "span timeline" });
  spans.forEach((sp, i) => {
    const x = LEFT + ((sp.start_time - t0) / span) * (W - LEFT - 8);
    const w = Math.max(1.5, (((sp.end_time ?? sp.start_time) - sp.start_time) / span) * (W - LEFT - 8));
    const kind = sp.status && sp.status.status_code === "ERROR" ? "error" : isLlmCall(sp) ? "llm" : rewards(sp).length ? "reward" : "";
    if (labelled) svg.append(s("text", { class: "span-label", x: 4, y: i * ROW + ROW - 4 }, `#${sp.sequence_id} ${sp.name.length > 34 ? sp.name.slice(0, 33) + "…" : sp.name}`));
    svg.append(s("rect", { class: `span-bar ${kind}`, x, y: i * ROW + 2, width: w, height: ROW - 4 }, s("title", {}, `#${sp.sequence_id} ${sp.name} ${seconds((sp.end_time ?? sp.start_time) - sp.start_time)}`)));
  });
  svg.append(s("text", { x: LEFT, y: height - 4 }, "0"));
  svg.append(s("text", { x: W - 8, y: height - 4, "text-anchor": "end" }, seconds(span)));
  return h("figure", { class: "chart timeline" }, svg);
}

function tree(spans) {
  if (!spans.length) return h("p", { class: "muted" }, "No spans.");
  const { roots, children } = spanTree(spans);
  const list = h("ul", {});
  const drawn = new Set();
  // Spans on a parent cycle hang from no root: each one not drawn yet starts a tree of its own (in sequence order).
  for (const sp of [...roots, ...spans]) if (!drawn.has(sp)) drawSubtree(sp, list, children, drawn);
  return h("div", { class: "tree", id: "span-tree" }, list);
}

/** Draws `root` and its descendants into `list`, each span once: iterative, so no parent chain overflows the stack. */
function drawSubtree(root, list, children, drawn) {
  const stack = [[root, list]];
  while (stack.length) {
    const [sp, into] = stack.pop();
    if (drawn.has(sp)) continue; // a span id shared by two attempts lists its children twice
    drawn.add(sp);
    const li = h("li", {}, spanDetails(sp));
    into.append(li);
    const kids = (children.get(sp.span_id) || []).filter((kid) => !drawn.has(kid));
    if (!kids.length) continue;
    const sub = h("ul", {});
    li.append(sub);
    for (let k = kids.length - 1; k >= 0; k--) stack.push([kids[k], sub]);
  }
}

function spanDetails(sp) {
  const details = h("details", { "data-span-id": sp.span_id }, h("summary", {}, h("span", { class: "mono" }, `#${sp.sequence_id} `), sp.name, h("span", { class: "muted" }, ` · ${seconds((sp.end_time ?? sp.start_time) - sp.start_time)}`)));
  // Attributes are drawn when opened: a 200-span rollout opens without building 200 JSON blocks.
  details.addEventListener("toggle", () => {
    if (details.open && details.childElementCount === 1) details.append(json({ span_id: sp.span_id, parent_id: sp.parent_id, attempt_id: sp.attempt_id, status: sp.status, attributes: sp.attributes }));
  });
  return details;
}

function message(m) {
  const content = typeof m.content === "string" ? m.content : m.content === null || m.content === undefined ? "" : JSON.stringify(m.content);
  return h("div", { class: "msg" }, h("div", { class: "role" }, m.role || ""), content ? h("div", {}, content) : null, m.tool_calls ? json(m.tool_calls) : null);
}

function llmCard(sp) {
  const c = llmCall(sp);
  return h(
    "details",
    { class: "llm-call", "data-span-id": sp.span_id, open: true },
    h("summary", {}, h("span", { class: "mono" }, `#${sp.sequence_id} `), c.model, " · ", h("span", { "data-testid": "tokens" }, `${c.inputTokens ?? "?"} in / ${c.outputTokens ?? "?"} out tokens`), " · ", h("span", { "data-testid": "latency" }, `${num(c.latencyMs, 1)} ms`), c.error ? h("span", { class: "error" }, ` · ${c.error}`) : null),
    h("div", { class: "grid2" }, h("div", {}, h("div", { class: "muted" }, "request"), c.request.map(message)), h("div", {}, h("div", { class: "muted" }, "response"), c.response.map(message))),
    c.toolCalls.length ? h("div", {}, h("div", { class: "muted" }, "tool calls"), c.toolCalls.map((t) => h("div", { class: "mono tool-call" }, `${t.function?.name ?? t.name}(${t.function?.arguments ?? ""})`))) : null,
    c.tools.length ? h("div", { class: "muted" }, `tools offered: ${c.tools.map((t) => t.function?.name ?? t.name).join(", ")}`) : null,
  );
}
