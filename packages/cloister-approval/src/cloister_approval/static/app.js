// Cloister approvals: live updates over Server-Sent Events, decisions over fetch().
// The server renders every item (autoescaped Jinja2); this script only moves those
// fragments around, so no HTML is ever built from data here.
//
// The page itself is a shell without data. The browser's session token lives in this
// origin's localStorage (scheme, host and port: no page on another port of the host can
// read or replace it) and goes with every request as "Authorization: Bearer"; the hub
// sets and reads no cookie. An EventSource cannot send that header, so the event stream
// is read with fetch(). /login?ticket=... trades a one-time ticket for the token.
//
// Nothing moves under the pointer: a decided (or expired) request keeps its place as a
// "settled" card showing what was done (with Undo) until the pointer has left the list;
// other changes keep whatever is under the pointer where it was (by scrolling).
"use strict";

const SETTLED_MS = 1500;     // a settled card stays at least this long
const UNDO_GUARD_MS = 600;   // a double click on a decision must not also undo it
const NOTIFY_KEY = "cloister.notifications";
const TOKEN_KEY = "cloister.hub-session";
// Why this tab was logged out, kept for its next load: the live stream may notice a
// logout before a reload does, and the reloaded page must still say why.
const LOGOUT_REASON_KEY = "cloister.logout-reason";
const RECONNECT_MS = 3000;   // as an EventSource's default retry
const SCOPES = { o: "once", s: "session", p: "project", g: "global" };
const COMMAND_SCOPES = ["once", "session", "project"];

// queued: while the pending lists are re-read after (re)connecting, events are kept
// here and applied, in order, to the fresh lists (applying one twice changes nothing).
// cloister: the filter ("" for every cloister); total: everything waiting, filtered or not.
const state = {
  selected: null, queued: null, again: false, pointer: null, sweep: null,
  cloister: new URLSearchParams(location.search).get("cloister") || "", total: 0,
  cloisters: null, cloistersAgain: false,
};

function $(selector, root = document) { return root.querySelector(selector); }
function $$(selector, root = document) { return Array.from(root.querySelectorAll(selector)); }

function fragment(html) {
  const template = document.createElement("template");
  template.innerHTML = html.trim();
  return template.content.firstElementChild;
}

function pendingItems() { return $$("li.item"); }
function groupOf(cloister) {
  return $$("#pending section.cloister").find((group) => group.dataset.cloister === cloister);
}

// The server writes times in UTC; show them in the viewer's own time zone.
function localTimes(root) {
  for (const element of $$("time[datetime]", root)) {
    const when = new Date(element.getAttribute("datetime"));
    if (Number.isNaN(when.getTime())) continue;
    element.textContent = when.toLocaleTimeString([], {
      hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
    });
    element.title = when.toLocaleString();
  }
}

// -- the session --------------------------------------------------------------------------

class LoggedOut extends Error {}

function loggedOut(reason) {
  localStorage.removeItem(TOKEN_KEY);
  reason = reason || sessionStorage.getItem(LOGOUT_REASON_KEY);
  document.body.dataset.auth = "out";
  document.body.dataset.live = "false";
  $("#login-reason").textContent = reason || $("#login-reason").textContent;
  $("#login").hidden = false;
  $("#app").hidden = true;
  $(".filter").hidden = true;
  $("#connection").textContent = "not logged in";
}

// fetch() with the session token; a 401 logs the page out (and throws LoggedOut).
async function hubFetch(url, options = {}) {
  const token = localStorage.getItem(TOKEN_KEY);
  if (!token) {
    loggedOut();
    throw new LoggedOut("not logged in");
  }
  const headers = { ...(options.headers || {}), Authorization: `Bearer ${token}` };
  const response = await fetch(url, { ...options, headers, credentials: "omit", cache: "no-store" });
  if (response.status === 401) {
    const payload = await response.json().catch(() => ({}));
    if (payload.detail) sessionStorage.setItem(LOGOUT_REASON_KEY, `${payload.detail}.`);
    loggedOut();
    throw new LoggedOut(payload.error || "not logged in");
  }
  return response;
}

// /login?ticket=...: the ticket leaves the address bar and the history at once, is
// traded for the session token, and the page goes on to /.
async function logIn() {
  const ticket = new URLSearchParams(location.search).get("ticket");
  history.replaceState(null, "", "/login");
  if (!ticket) { loggedOut(); return; }
  $("#connection").textContent = "logging in…";
  let payload = {};
  try {
    const response = await fetch("/api/v1/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ticket }),
      credentials: "omit",
      cache: "no-store",
    });
    payload = await response.json().catch(() => ({}));
    if (!response.ok) {
      loggedOut(`${payload.error || `${response.status} ${response.statusText}`}.`);
      return;
    }
  } catch (error) {
    loggedOut(`Could not log in: ${error.message}.`);
    return;
  }
  localStorage.setItem(TOKEN_KEY, payload.token);
  sessionStorage.removeItem(LOGOUT_REASON_KEY);
  location.replace("/");
}

// -- keeping the pointer's target in place ----------------------------------------------

document.addEventListener("pointermove", (event) => {
  state.pointer = { x: event.clientX, y: event.clientY };
});
document.documentElement.addEventListener("pointerleave", () => { state.pointer = null; });

// Run change(); then scroll so that the element under the pointer is where it was.
function keepInPlace(change) {
  const pointer = state.pointer;
  const target = pointer && document.elementFromPoint(pointer.x, pointer.y);
  const before = target && target.getBoundingClientRect().top;
  change();
  if (target && target.isConnected) {
    const moved = target.getBoundingClientRect().top - before;
    if (moved) window.scrollBy(0, moved);
  }
}

// -- the lists ---------------------------------------------------------------------------

function refreshCounts(pending) {
  for (const kind of ["domain", "command"]) {
    const badge = $(`[data-count="${kind}"]`);
    if (badge) badge.textContent = String($$(`li.item[data-kind="${kind}"]`).length);
  }
  $("[data-empty]").hidden = $$("#pending section.cloister").length > 0;
  if (typeof pending === "number") state.total = pending;
  else if (!state.cloister) state.total = pendingItems().length;
  // The title counts every cloister's requests, whatever the filter shows.
  document.title = (state.total ? `(${state.total}) ` : "") + "Cloister approvals";
}

// html is the item's cloister group holding only this item.
function insertItem(html) {
  const group = fragment(html);
  const element = $("li", group);
  if (document.getElementById(element.id)) return;
  localTimes(group);
  keepInPlace(() => {
    const existing = groupOf(group.dataset.cloister);
    if (existing) $("ul.items", existing).appendChild(element);
    else $("#pending").appendChild(group);
    refreshCounts();
  });
  if (!state.selected) select(element);
}

const GONE = {
  decided: "Decided elsewhere (see Recent decisions).",
  expired: "Expired before anyone decided.",
  dropped: "Dropped: its cloister was stopped.",
};

function removeItem(kind, id, outcome) {
  const element = document.getElementById(`${kind}-${id}`);
  if (!element || !element.classList.contains("item")) return;
  if (element.dataset.busy) {  // being decided here: decide() settles it
    element.dataset.gone = outcome;
    return;
  }
  settle(element);
  $(".outcome", element).textContent = GONE[outcome] || `Gone (${outcome}).`;
  if (outcome === "expired") announce(`A ${kind} request expired before anyone decided.`);
}

// The item is no longer pending: it keeps its place, emptied, until the pointer is away.
function settle(element) {
  if (state.selected === element) {
    const items = pendingItems();
    const index = items.indexOf(element);
    // Scroll to it only if that moves nothing under the pointer.
    select(items[index + 1] || items[index - 1] || null, !$("#pending").matches(":hover"));
  }
  element.style.minHeight = `${element.getBoundingClientRect().height}px`;
  element.classList.remove("item", "selected");
  element.classList.add("settled");
  element.removeAttribute("tabindex");
  element.dataset.settledAt = String(Date.now());
  const outcome = document.createElement("p");
  outcome.className = "outcome";
  outcome.setAttribute("role", "status");
  element.replaceChildren(outcome);
  refreshCounts();
  scheduleSweep(SETTLED_MS);
}

// Show the decision (as in Recent decisions, with its Undo) in the settled card.
function showOutcome(card, decisionElement) {
  const copy = decisionElement.cloneNode(true);
  copy.removeAttribute("id");
  copy.classList.add("outcome");
  card.replaceChildren(copy);
}

function scheduleSweep(delay) {
  clearTimeout(state.sweep);
  state.sweep = setTimeout(sweep, delay);
}

// Remove the settled cards once the pointer is not over the list.
function sweep() {
  const cards = $$("#pending li.settled");
  if (!cards.length) return;
  if ($("#pending").matches(":hover")) { scheduleSweep(SETTLED_MS); return; }
  const now = Date.now();
  const old = cards.filter((card) => now - Number(card.dataset.settledAt) >= SETTLED_MS);
  keepInPlace(() => {
    for (const card of old) card.remove();
    for (const group of $$("#pending section.cloister")) {
      if (!$("li", group)) group.remove();
    }
    refreshCounts();
  });
  if (old.length < cards.length) scheduleSweep(SETTLED_MS);
}

function showDecision(decision, html) {
  const element = fragment(html);
  localTimes(element);
  keepInPlace(() => {
    const existing = document.getElementById(element.id);
    if (existing) existing.replaceWith(element);
    else $("#decisions").prepend(element);
  });
  for (const card of $$(`#pending li.settled[data-decision="${decision.id}"]`)) {
    showOutcome(card, element);
  }
  announce(decision.summary);
}

function announce(text) { $("#connection").textContent = text; }

function select(element, scroll = false) {
  for (const item of pendingItems()) item.classList.remove("selected");
  state.selected = element;
  if (element) {
    element.classList.add("selected");
    element.focus({ preventScroll: true });
    if (scroll) element.scrollIntoView({ block: "nearest" });
  }
}

// -- deciding --------------------------------------------------------------------------

async function post(url, body) {
  const response = await hubFetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(payload.error || `${response.status} ${response.statusText}`);
  return payload;
}

async function decide(item, action, scope) {
  if (item.dataset.busy || !item.classList.contains("item")) return;  // one decision per item
  item.dataset.busy = "true";
  const kind = item.dataset.kind;
  const result = $(".result", item);
  for (const button of $$("button", item)) button.disabled = true;
  let body;
  if (kind === "domain") {
    const wildcard = $("input[name=wildcard]", item);
    body = { action, scope, wildcard: Boolean(wildcard && wildcard.checked) };
  } else {
    const reason = $("input[name=reason]", item).value.trim();
    body = { action, scope, reason: reason || null };
  }
  let decision;
  try {
    decision = await post(`/api/v1/${kind}s/${item.dataset.id}/decision`, body);
  } catch (error) {
    delete item.dataset.busy;
    if (error instanceof LoggedOut) return;
    if (item.dataset.gone) {  // decided elsewhere, expired or dropped meanwhile
      removeItem(kind, item.dataset.id, item.dataset.gone);
      return;
    }
    result.hidden = false;
    result.textContent = `Could not decide: ${error.message}`;
    for (const button of $$("button", item)) button.disabled = false;
    return;
  }
  settle(item);
  item.dataset.decision = decision.id;
  $(".outcome", item).textContent = decision.summary;
  const shown = document.getElementById(`decision-${decision.id}`);
  if (shown) showOutcome(item, shown);  // else the decision event fills it in
  announce(decision.summary);
}

async function undo(id) {
  try {
    const decision = await post(`/api/v1/decisions/${id}/undo`, {});
    announce(decision.summary);
  } catch (error) {
    if (!(error instanceof LoggedOut)) announce(`Could not undo: ${error.message}`);
  }
}

// -- countdowns ------------------------------------------------------------------------

// 58 -> "0:58", 725 -> "12:05"
function clock(seconds) {
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`;
}

function tickCountdowns() {
  const now = Date.now();
  for (const item of pendingItems()) {
    const left = Math.max(0, Math.round((Date.parse(item.dataset.expires) - now) / 1000));
    const element = $(".countdown", item);
    element.textContent = clock(left);
    element.classList.toggle("urgent", left <= 10);
  }
}

// -- desktop notifications (opt-in, remembered in this browser) ---------------------------

function notificationsOn() {
  return "Notification" in window && localStorage.getItem(NOTIFY_KEY) === "on"
    && Notification.permission === "granted";
}

function showNotificationState() {
  const button = $("#notify");
  if (!("Notification" in window)) return;  // stays hidden
  button.hidden = false;
  const on = notificationsOn();
  button.setAttribute("aria-pressed", String(on));
  button.textContent = `Desktop notifications: ${on ? "on" : "off"}`;
}

async function toggleNotifications() {
  if (notificationsOn()) {
    localStorage.removeItem(NOTIFY_KEY);
  } else if (await Notification.requestPermission() === "granted") {
    localStorage.setItem(NOTIFY_KEY, "on");
  } else {
    announce("The browser did not allow notifications for this page.");
  }
  showNotificationState();
}

function notify(kind, item) {
  if (!notificationsOn()) return;
  if (document.visibilityState === "visible" && document.hasFocus()) return;  // already seen
  const what = kind === "domain" ? `${item.host}:${item.port}` : `${item.command}\nin ${item.cwd}`;
  const notification = new Notification(`Cloister ${item.cloister} asks for a ${kind}`, {
    body: what, tag: `${kind}-${item.id}`,
  });
  notification.onclick = () => {
    window.focus();
    const element = document.getElementById(`${kind}-${item.id}`);
    if (element && element.classList.contains("item")) select(element, true);
  };
}

// -- the event stream ------------------------------------------------------------------

function apply(change) {
  if (state.queued) state.queued.push(change);
  else change();
}

// Re-read the pending lists and the recent decisions: the page was rendered before its
// event stream was connected (or the stream was dropped), and what happened in between
// came as no event.
async function resync() {
  if (state.queued) { state.again = true; return; }  // re-read once more when done
  state.queued = [];
  const selectedId = state.selected ? state.selected.id : null;
  const query = state.cloister ? `?cloister=${encodeURIComponent(state.cloister)}` : "";
  try {
    const [pending, decisions] = await Promise.all([
      hubFetch(`/fragments/pending${query}`),
      hubFetch(`/fragments/decisions${query}`),
      refreshCloisters(),
    ]);
    if (pending.ok) {
      const html = await pending.text();
      keepInPlace(() => { $("#pending").innerHTML = html; });
      localTimes($("#pending"));
      state.total = Number($("[data-empty]").dataset.total) || 0;
    }
    if (decisions.ok) {
      const html = await decisions.text();
      keepInPlace(() => { $("#decisions").innerHTML = html; });
      localTimes($("#decisions"));
    }
  } catch (error) {
    if (!(error instanceof LoggedOut)) announce(`Could not refresh the list: ${error.message}`);
  } finally {
    const queued = state.queued;
    state.queued = null;
    for (const change of queued) change();
    const items = pendingItems();
    select((selectedId && document.getElementById(selectedId)) || items[0] || null);
    refreshCounts();
    tickCountdowns();
  }
  if (state.again) {
    state.again = false;
    resync();
  }
}

// -- the cloister filter -------------------------------------------------------------------

// The filter's choices, rendered by the hub (every cloister with a token, something
// waiting or a kept decision). One request at a time: a burst of changes re-reads once.
async function refreshCloisters() {
  if (state.cloisters) { state.cloistersAgain = true; return state.cloisters; }
  state.cloisters = (async () => {
    do {
      state.cloistersAgain = false;
      const query = state.cloister ? `?cloister=${encodeURIComponent(state.cloister)}` : "";
      const response = await hubFetch(`/fragments/cloisters${query}`);
      if (response.ok) $("#cloister-filter").innerHTML = await response.text();
    } while (state.cloistersAgain);
  })();
  try { await state.cloisters; } finally { state.cloisters = null; }
}

function shown(cloister) { return !state.cloister || cloister === state.cloister; }

// A cloister the filter does not offer yet (its first request): added in order, here.
function knowCloister(cloister) {
  const select = $("#cloister-filter");
  const options = Array.from(select.options);
  if (options.some((option) => option.value === cloister)) return;
  const next = options.find((option) => option.value && option.value > cloister);
  select.add(new Option(cloister, cloister), next || null);
}

function filterBy(cloister) {
  state.cloister = cloister;
  history.replaceState(null, "", cloister ? `/?cloister=${encodeURIComponent(cloister)}` : "/");
  state.selected = null;
  resync();
}

// -- the event stream ------------------------------------------------------------------

const handlers = {
  hello() {
    $("#connection").textContent = "live";
    document.body.dataset.live = "true";
    // Subscribed from now on; anything held or decided before (while the page loaded,
    // or while disconnected) is only in the hub's current lists.
    resync();
  },
  decision(data) {
    knowCloister(data.decision.cloister);
    if (shown(data.decision.cloister)) showDecision(data.decision, data.html);
  },
  tokens() { refreshCloisters().catch(() => {}); },
};
for (const kind of ["domain", "command"]) {
  handlers[`${kind}-added`] = (data) => {
    knowCloister(data.item.cloister);
    apply(() => {
      if (shown(data.item.cloister)) insertItem(data.html);
      refreshCounts(data.pending);
      tickCountdowns();
      document.dispatchEvent(new CustomEvent("cloister:added", { detail: data.item }));
    });
    notify(kind, data.item);
  };
  handlers[`${kind}-removed`] = (data) => {
    apply(() => {
      removeItem(kind, data.id, data.outcome);
      refreshCounts(data.pending);
    });
  };
}

function dispatch(name, data) {
  const handler = handlers[name || "message"];
  if (handler) handler(JSON.parse(data));
}

// Server-Sent Events from a fetch() body: "event:" and "data:" lines, a blank line
// ends an event, a line starting with ":" is a comment (the hub's keep-alive pings).
async function readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let name = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    const lines = buffer.split(/\r\n|\r|\n/);
    buffer = lines.pop();  // an unfinished line waits for the next chunk
    for (const line of lines) {
      if (line === "") {
        if (data.length) dispatch(name, data.join("\n"));
        name = "";
        data = [];
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = text;
        else if (field === "data") data.push(text);
      }
    }
  }
}

// Connected until the stream ends or fails; then again after RECONNECT_MS, as an
// EventSource would. A 401 (logged out, expired) ends it for good.
async function connect() {
  for (;;) {
    try {
      const response = await hubFetch("/api/v1/events", { headers: { Accept: "text/event-stream" } });
      if (response.ok && response.body) await readEvents(response.body);
    } catch (error) {
      if (error instanceof LoggedOut) return;
    }
    $("#connection").textContent = "reconnecting…";
    document.body.dataset.live = "false";
    await new Promise((resolve) => { setTimeout(resolve, RECONNECT_MS); });
  }
}

// -- clicks and keys -------------------------------------------------------------------

document.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  if (button.id === "notify") { toggleNotifications(); return; }
  if (button.dataset.undo) {
    const card = button.closest("li.settled");
    if (card && Date.now() - Number(card.dataset.settledAt) < UNDO_GUARD_MS) return;
    undo(button.dataset.undo);
    return;
  }
  const item = button.closest("li.item");
  if (item && button.dataset.action) decide(item, button.dataset.action, button.dataset.scope);
});

// Domains: o s p g allow, O S P G deny. Commands: o s p (or y, Y) approve once / for the
// session / for the project; O (or n) deny.
function keyDecision(kind, key) {
  const scope = SCOPES[key.toLowerCase()];
  if (kind === "domain") return scope ? [key === key.toLowerCase() ? "allow" : "deny", scope] : null;
  if (key === "y") return ["approve", "once"];
  if (key === "Y") return ["approve", "session"];
  if (key === "n" || key === "O") return ["deny", "once"];
  return COMMAND_SCOPES.includes(scope) && key === key.toLowerCase() ? ["approve", scope] : null;
}

document.addEventListener("keydown", (event) => {
  if (event.target.matches("input[type=text], select") || event.ctrlKey || event.metaKey || event.altKey) return;
  const items = pendingItems();
  const current = state.selected && items.includes(state.selected) ? state.selected : items[0];
  const key = event.key;
  const decision = current && keyDecision(current.dataset.kind, key);
  if (key === "j" || key === "k") {
    if (!items.length) return;
    const index = current ? items.indexOf(current) : -1;
    const next = key === "j" ? Math.min(items.length - 1, index + 1) : Math.max(0, index - 1);
    select(items[next], true);
  } else if (key === "u") {
    const button = $("#decisions button.undo");
    if (button) undo(button.dataset.undo);
  } else if (current && current.dataset.kind === "domain" && key === "w") {
    const box = $("input[name=wildcard]", current);
    if (box) box.checked = !box.checked;
  } else if (decision) {
    decide(current, ...decision);
  } else {
    return;
  }
  event.preventDefault();
});

document.addEventListener("DOMContentLoaded", () => {
  if (location.pathname === "/login") { logIn(); return; }
  if (!localStorage.getItem(TOKEN_KEY)) { loggedOut(); return; }
  document.body.dataset.auth = "in";
  $("#app").hidden = false;
  $(".filter").hidden = false;
  refreshCounts();
  tickCountdowns();
  setInterval(tickCountdowns, 1000);
  $("#pending").addEventListener("mouseleave", () => scheduleSweep(300));
  $("#cloister-filter").addEventListener("change", (event) => filterBy(event.target.value));
  showNotificationState();
  connect();
});
