// Cloister approvals: live updates over Server-Sent Events, decisions over fetch().
// The server renders every item (autoescaped Jinja2); this script only moves those
// fragments around, so no HTML is ever built from data here.
//
// Nothing moves under the pointer: a decided (or expired) request keeps its place as a
// "settled" card showing what was done (with Undo) until the pointer has left the list;
// other changes keep whatever is under the pointer where it was (by scrolling).
"use strict";

const SETTLED_MS = 1500;     // a settled card stays at least this long
const UNDO_GUARD_MS = 600;   // a double click on a decision must not also undo it
const NOTIFY_KEY = "cloister.notifications";
const SCOPES = { o: "once", s: "session", p: "project", g: "global" };
const COMMAND_SCOPES = ["once", "session", "project"];

// queued: while the pending lists are re-read after (re)connecting, events are kept
// here and applied, in order, to the fresh lists (applying one twice changes nothing).
const state = { selected: null, queued: null, again: false, pointer: null, sweep: null };

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
  const total = typeof pending === "number" ? pending : pendingItems().length;
  document.title = (total ? `(${total}) ` : "") + "Cloister approvals";
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
  const response = await fetch(url, {
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
    announce(`Could not undo: ${error.message}`);
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
  try {
    const [pending, decisions] = await Promise.all([
      fetch("/fragments/pending"),
      fetch("/fragments/decisions"),
    ]);
    if (pending.ok) {
      const html = await pending.text();
      keepInPlace(() => { $("#pending").innerHTML = html; });
      localTimes($("#pending"));
    }
    if (decisions.ok) {
      const html = await decisions.text();
      keepInPlace(() => { $("#decisions").innerHTML = html; });
      localTimes($("#decisions"));
    }
  } catch (error) {
    announce(`Could not refresh the list: ${error.message}`);
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

function connect() {
  const source = new EventSource("/api/v1/events");
  source.addEventListener("hello", () => {
    $("#connection").textContent = "live";
    document.body.dataset.live = "true";
    // Subscribed from now on; anything held or decided before (while the page loaded,
    // or while disconnected) is only in the hub's current lists.
    resync();
  });
  for (const kind of ["domain", "command"]) {
    source.addEventListener(`${kind}-added`, (event) => {
      const data = JSON.parse(event.data);
      apply(() => {
        insertItem(data.html);
        refreshCounts(data.pending);
        tickCountdowns();
        document.dispatchEvent(new CustomEvent("cloister:added", { detail: data.item }));
      });
      notify(kind, data.item);
    });
    source.addEventListener(`${kind}-removed`, (event) => {
      const data = JSON.parse(event.data);
      apply(() => {
        removeItem(kind, data.id, data.outcome);
        refreshCounts(data.pending);
      });
    });
  }
  source.addEventListener("decision", (event) => {
    const data = JSON.parse(event.data);
    showDecision(data.decision, data.html);
  });
  source.onerror = () => {
    $("#connection").textContent = "reconnecting…";
    document.body.dataset.live = "false";
  };
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
  if (event.target.matches("input[type=text]") || event.ctrlKey || event.metaKey || event.altKey) return;
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
  localTimes(document);
  select(pendingItems()[0] || null);
  refreshCounts();
  tickCountdowns();
  setInterval(tickCountdowns, 1000);
  $("#pending").addEventListener("mouseleave", () => scheduleSweep(300));
  showNotificationState();
  connect();
});
