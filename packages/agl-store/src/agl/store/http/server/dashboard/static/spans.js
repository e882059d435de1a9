// Reading agl's meaning out of spans: rewards, LLM calls, annotations (same conventions as agl.tracer).
import { parseJSON } from "./util.js";

export const LLM_CALL = "agentlightning.llm_call";
export const REWARD = "agentlightning.reward";
export const ANNOTATION = "agentlightning.annotation";
const REWARD_KEY = /^agentlightning\.reward\.(\d+)\.(name|value)$/;

/** The reward dimensions of a span, primary first: [{name, value}]. */
export function rewards(span) {
  const dims = {};
  for (const [key, value] of Object.entries(span.attributes || {})) {
    const m = REWARD_KEY.exec(key);
    if (m) (dims[m[1]] ||= {})[m[2]] = value;
  }
  const out = Object.keys(dims)
    .sort((a, b) => Number(a) - Number(b))
    .filter((k) => typeof dims[k].value === "number")
    .map((k) => ({ name: dims[k].name ?? "primary", value: dims[k].value }));
  if (!out.length && (span.name === REWARD || span.name === ANNOTATION) && typeof (span.attributes || {}).reward === "number") {
    out.push({ name: "primary", value: span.attributes.reward });
  }
  return out;
}

export function isLlmCall(span) {
  const a = span.attributes || {};
  return span.name === LLM_CALL || "gen_ai.request.model" in a;
}

export function llmCall(span) {
  const a = span.attributes || {};
  const latencyMs = typeof a["agentlightning.llm.latency_ms"] === "number" ? a["agentlightning.llm.latency_ms"] : (span.end_time - span.start_time) * 1000;
  const request = parseJSON(a["agentlightning.llm.request.messages"] ?? a["agentlightning.llm.request.prompt"] ?? null);
  const response = parseJSON(a["agentlightning.llm.response.messages"] ?? null);
  const tools = parseJSON(a["agentlightning.llm.request.tools"] ?? null);
  const toolCalls = [];
  for (const message of Array.isArray(response) ? response : []) {
    for (const call of (message && message.tool_calls) || []) toolCalls.push(call);
  }
  return {
    model: a["gen_ai.response.model"] || a["gen_ai.request.model"] || "",
    inputTokens: a["gen_ai.usage.input_tokens"],
    outputTokens: a["gen_ai.usage.output_tokens"],
    latencyMs,
    request: Array.isArray(request) ? request : request === null ? [] : [{ role: "prompt", content: request }],
    response: Array.isArray(response) ? response : [],
    tools: Array.isArray(tools) ? tools : [],
    toolCalls,
    error: a["error.type"] || (span.status && span.status.status_code === "ERROR" ? span.status.description || "error" : null),
  };
}

/** Parent → children, siblings sorted by sequence id; spans whose parent is not here are roots. */
export function spanTree(spans) {
  const byId = new Map(spans.map((sp) => [sp.span_id, sp]));
  const children = new Map();
  const roots = [];
  for (const sp of spans) {
    if (sp.parent_id && byId.has(sp.parent_id) && sp.parent_id !== sp.span_id) {
      if (!children.has(sp.parent_id)) children.set(sp.parent_id, []);
      children.get(sp.parent_id).push(sp);
    } else roots.push(sp);
  }
  const order = (a, b) => a.sequence_id - b.sequence_id || a.start_time - b.start_time;
  roots.sort(order);
  for (const list of children.values()) list.sort(order);
  return { roots, children };
}
