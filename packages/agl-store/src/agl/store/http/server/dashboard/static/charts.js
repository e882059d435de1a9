// Inline SVG charts: a line chart over numeric x, a bar chart over categories. No libraries.
import { h, s } from "./util.js";

const W = 560;
const H = 220;
const PAD = { l: 48, r: 12, t: 12, b: 32 };

function ticks(min, max, n = 5) {
  if (min === max) return [min];
  const step = (max - min) / (n - 1);
  return Array.from({ length: n }, (_, i) => min + i * step);
}

function fmt(v) {
  const a = Math.abs(v);
  if (a >= 1000) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

function frame(title, svg, testid) {
  return h("figure", { class: "chart", "data-testid": testid }, h("figcaption", {}, title), svg);
}

/** points: [{x, y}] sorted by x; xFormat turns an x value into tick text. */
export function lineChart(title, points, { xFormat = fmt, yLabel = "", testid, xPad = 1 } = {}) {
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  if (!points.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data yet"));
    return frame(title, svg, testid);
  }
  const xs = points.map((p) => p.x);
  const ys = points.map((p) => p.y);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys, 0), Math.max(...ys)];
  if (x0 === x1) [x0, x1] = [x0 - xPad, x1 + xPad];
  if (y0 === y1) y1 = y0 + 1;
  const X = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const Y = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  for (const t of ticks(y0, y1)) {
    svg.append(s("line", { class: "grid", x1: PAD.l, x2: W - PAD.r, y1: Y(t), y2: Y(t) }));
    svg.append(s("text", { x: PAD.l - 4, y: Y(t) + 3, "text-anchor": "end" }, fmt(t)));
  }
  let previous = null;
  for (const t of ticks(x0, x1, 4)) {
    const label = xFormat(t);
    if (label !== previous) svg.append(s("text", { x: X(t), y: H - PAD.b + 14, "text-anchor": "middle" }, label));
    previous = label;
  }
  svg.append(s("line", { class: "axis", x1: PAD.l, x2: PAD.l, y1: PAD.t, y2: H - PAD.b }));
  svg.append(s("line", { class: "axis", x1: PAD.l, x2: W - PAD.r, y1: H - PAD.b, y2: H - PAD.b }));
  if (yLabel) svg.append(s("text", { x: 4, y: PAD.t + 2, transform: `rotate(90 4 ${PAD.t + 2})` }, yLabel));
  svg.append(s("polyline", { class: "line", points: points.map((p) => `${X(p.x)},${Y(p.y)}`).join(" ") }));
  for (const p of points) svg.append(s("circle", { class: "dot", cx: X(p.x), cy: Y(p.y), r: 2.5 }, s("title", {}, `${xFormat(p.x)}: ${fmt(p.y)}`)));
  return frame(title, svg, testid);
}

/** bars: [{label, value}]. */
export function barChart(title, bars, { testid } = {}) {
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  if (!bars.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data yet"));
    return frame(title, svg, testid);
  }
  const y0 = Math.min(0, ...bars.map((b) => b.value));
  let y1 = Math.max(...bars.map((b) => b.value));
  if (y1 === y0) y1 = y0 + 1;
  const Y = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  const slot = (W - PAD.l - PAD.r) / bars.length;
  for (const t of ticks(y0, y1)) {
    svg.append(s("line", { class: "grid", x1: PAD.l, x2: W - PAD.r, y1: Y(t), y2: Y(t) }));
    svg.append(s("text", { x: PAD.l - 4, y: Y(t) + 3, "text-anchor": "end" }, fmt(t)));
  }
  bars.forEach((b, i) => {
    const x = PAD.l + i * slot + slot * 0.15;
    const top = Math.min(Y(b.value), Y(0));
    svg.append(
      s("rect", { class: "bar", x, y: top, width: slot * 0.7, height: Math.max(1, Math.abs(Y(b.value) - Y(0))) }, s("title", {}, `${b.label}: ${fmt(b.value)}`)),
    );
    svg.append(s("text", { x: x + slot * 0.35, y: H - PAD.b + 14, "text-anchor": "middle" }, b.label.length > 14 ? b.label.slice(0, 13) + "…" : b.label));
  });
  svg.append(s("line", { class: "axis", x1: PAD.l, x2: W - PAD.r, y1: Y(0), y2: Y(0) }));
  return frame(title, svg, testid);
}
