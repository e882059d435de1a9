// The dashboard shell: token prompt, hash routing, live refresh.
import { AuthError, get, getToken, setToken } from "./api.js";
import { h, parseHash } from "./util.js";
import * as resources from "./resources.js";
import * as rollout from "./rollout.js";
import * as rollouts from "./rollouts.js";
import * as training from "./training.js";
import * as workers from "./workers.js";

const VIEWS = { rollouts, rollout, resources, workers, training };
const REFRESH_MS = 2000;
const $ = (id) => document.getElementById(id);
let timer = null;
let rendering = false;

function go(hash) {
  if (location.hash === hash) show();
  else location.hash = hash;
}

function showLogin(message) {
  $("login").hidden = false;
  $("view").hidden = true;
  $("logout").hidden = true;
  $("login-error").textContent = message || "";
  $("token-input").focus();
}

async function show({ quiet = false } = {}) {
  if (rendering) return;
  rendering = true;
  const { path, params } = parseHash(location.hash);
  const name = path[0] && VIEWS[path[0]] ? path[0] : "rollouts";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === (name === "rollout" ? "rollouts" : name));
  const view = $("view");
  const started = performance.now();
  try {
    const node = await VIEWS[name].render({ path, params, go });
    const y = window.scrollY;
    view.replaceChildren(node);
    if (quiet) window.scrollTo(0, y);
    view.dataset.view = name;
    view.dataset.renderMs = String(Math.round(performance.now() - started));
    view.dataset.renderedAt = String(Date.now());
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    view.hidden = false;
    $("login").hidden = true;
    $("logout").hidden = !getToken();
  } catch (err) {
    if (err instanceof AuthError) showLogin(getToken() ? "The saved token was refused; enter it again." : "");
    else {
      view.replaceChildren(h("p", { class: "error", id: "view-error" }, String(err.message || err)));
      view.hidden = false;
      $("login").hidden = true;
    }
  } finally {
    rendering = false;
  }
}

function schedule() {
  clearInterval(timer);
  timer = setInterval(() => {
    if (!$("live").checked || !$("login").hidden || document.hidden) return;
    const focused = document.activeElement;
    if (focused && $("view").contains(focused) && focused.tagName === "INPUT" && focused.type !== "checkbox") return; // typing
    const node = $("view").firstElementChild;
    if ($("view").dataset.view === "rollout" && node && node.refreshable === false) return; // a finished rollout does not change
    show({ quiet: true });
  }, REFRESH_MS);
}

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  try {
    await get("/statistics", undefined, token);
  } catch (err) {
    $("login-error").textContent = err instanceof AuthError ? "Wrong token: the store refused it." : String(err.message || err);
    return;
  }
  setToken(token);
  $("token-input").value = "";
  show();
});

$("logout").addEventListener("click", () => {
  setToken(null);
  showLogin("");
});

window.addEventListener("hashchange", () => show());
show();
schedule();
