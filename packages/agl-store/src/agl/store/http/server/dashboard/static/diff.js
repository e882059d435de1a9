// Line diff of two texts (prompt templates), for the resources page. The page redraws every 2 s, and templates can
// be long: the work is bounded (MAX_CELLS) and a redraw with unchanged templates reuses the last result.
export const MAX_CELLS = 4_000_000; // the LCS table of the changed middle: 16 MB, some tens of ms
const RECENT = 16; // results kept: one per template shown, with room to spare
const recent = [];

/** Line diff: [["=" | "-" | "+", line]]. Minimal when the changed middle fits MAX_CELLS, else that middle as one block. */
export function lineDiff(before, after) {
  const hit = recent.find((r) => r.before === before && r.after === after);
  if (hit) return hit.out;
  const out = Object.freeze(diffLines(before.split("\n"), after.split("\n")));
  recent.unshift({ before, after, out });
  recent.length = Math.min(recent.length, RECENT);
  return out;
}

function diffLines(x, y) {
  // A template edit usually touches a few lines: the common head and tail are matched line by line.
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let endX = x.length;
  let endY = y.length;
  while (endX > head && endY > head && x[endX - 1] === y[endY - 1]) endX--, endY--;
  const midX = x.slice(head, endX);
  const midY = y.slice(head, endY);
  const middle = midX.length * midY.length <= MAX_CELLS ? lcs(midX, midY) : block(midX, midY);
  return same(x.slice(0, head)).concat(middle, same(x.slice(endX)));
}

function same(lines) {
  return lines.map((line) => ["=", line]);
}

/** Beyond the budget: every old line removed, every new line added. */
function block(x, y) {
  return x.map((line) => ["-", line]).concat(y.map((line) => ["+", line]));
}

/** Longest-common-subsequence diff, O(n·m) time and memory. */
function lcs(x, y) {
  const n = x.length;
  const m = y.length;
  const w = m + 1;
  const L = new Int32Array((n + 1) * w); // L[i * w + j]: LCS length of x[i:] and y[j:]
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i * w + j] = x[i] === y[j] ? L[(i + 1) * w + j + 1] + 1 : Math.max(L[(i + 1) * w + j], L[i * w + j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) out.push(["=", x[i++]]), j++;
    else if (L[(i + 1) * w + j] >= L[i * w + j + 1]) out.push(["-", x[i++]]);
    else out.push(["+", y[j++]]);
  }
  while (i < n) out.push(["-", x[i++]]);
  while (j < m) out.push(["+", y[j++]]);
  return out;
}
