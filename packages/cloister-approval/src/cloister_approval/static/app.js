// Cloister approvals: live updates over Server-Sent Events, decisions over fetch().
// The server renders every item (autoescaped Jinja2); this script only moves those
// fragments around, so no HTML is ever built from data here.
"use strict";

// queued: while the pending lists are re-read after (re)connecting, events are kept
// here and applied, in order, to the fresh lists (applying one twice changes nothing).
const state = { selected: null, queued: null, again: false };

function $(selector, root = document) { return root.querySelector(selector); }
function $$(selector, root = document) { return Array.from(root.querySelectorAll(selector)); }

function fragment(html) {
  const template = document.createElement("template");
  template.innerHTML = html.trim();
  return template.content.firstElementChild;
}

function pendingItems() { return $$("li.item"); }

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

function refreshCounts(pending) {
  for (const kind of ["domain", "command"]) {
    const count = $$(`li.item[data-kind="${kind}"]`).length;
    const badge = $(`[data-count="${kind}"]`);
    if (badge) badge.textContent = String(count);
    const empty = $(`[data-empty="${kind}"]`);
    if (empty) empty.hidden = count > 0;
  }
  const total = typeof pending === "number" ? pending : pendingItems().length;
  document.title = (total ? `(${total}) ` : "") + "Cloister approvals";
}

function insertItem(kind, html) {
  const element = fragment(html);
  if (document.getElementById(element.id)) return;
  localTimes(element);
  $(`#${kind}-list`).appendChild(element);
  if (!state.selected) select(element);
}

function removeItem(kind, id, outcome) {
  const element = document.getElementById(`${kind}-${id}`);
  if (!element) return;
  if (state.selected === element) {
    const items = pendingItems();
    const next = items[items.indexOf(element) + 1] || items[items.indexOf(element) - 1] || null;
    select(next === element ? null : next);
  }
  element.remove();
  if (outcome === "expired") announce(`A ${kind} request expired before anyone decided.`);
}

function showDecision(decision, html) {
  const list = $("#decisions");
  const element = fragment(html);
  localTimes(element);
  const existing = document.getElementById(element.id);
  if (existing) existing.replaceWith(element);
  else list.prepend(element);
  announce(decision.summary);
}

function announce(text) { $("#connection").textContent = text; }

function select(element) {
  for (const item of pendingItems()) item.classList.remove("selected");
  state.selected = element;
  if (element) {
    element.classList.add("selected");
    element.focus({ preventScroll: false });
  }
}

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
  if (item.dataset.busy) return;  // one decision per item (a key pressed twice)
  item.dataset.busy = "true";
  const kind = item.dataset.kind;
  const result = $(".result", item);
  for (const button of $$("button", item)) button.disabled = true;
  try {
    let body;
    if (kind === "domain") {
      const wildcard = $("input[name=wildcard]", item);
      body = { action, scope, wildcard: Boolean(wildcard && wildcard.checked) };
    } else {
      const reason = $("input[name=reason]", item).value.trim();
      body = { action, reason: reason || null };
    }
    const decision = await post(`/api/v1/${kind}s/${item.dataset.id}/decision`, body);
    announce(decision.summary);
  } catch (error) {
    result.hidden = false;
    result.textContent = `Could not decide: ${error.message}`;
    for (const button of $$("button", item)) button.disabled = false;
    delete item.dataset.busy;
  }
}

async function undo(id) {
  try {
    const decision = await post(`/api/v1/decisions/${id}/undo`, {});
    announce(decision.summary);
  } catch (error) {
    announce(`Could not undo: ${error.message}`);
  }
}

function tickCountdowns() {
  const now = Date.now();
  for (const item of pendingItems()) {
    const left = Math.max(0, Math.round((Date.parse(item.dataset.expires) - now) / 1000));
    const element = $(".countdown", item);
    element.textContent = left > 0 ? `${left}s left` : "expiring";
    element.classList.toggle("urgent", left <= 10);
  }
}

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
      $("#pending").innerHTML = await pending.text();
      localTimes($("#pending"));
    }
    if (decisions.ok) {
      $("#decisions").innerHTML = await decisions.text();
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
        insertItem(kind, data.html);
        refreshCounts(data.pending);
        tickCountdowns();
        document.dispatchEvent(new CustomEvent("cloister:added", { detail: data.item }));
      });
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

document.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  if (button.dataset.undo) { undo(button.dataset.undo); return; }
  const item = button.closest("li.item");
  if (item && button.dataset.action) decide(item, button.dataset.action, button.dataset.scope);
});

const SCOPES = { o: "once", s: "session", p: "project", g: "global" };

document.addEventListener("keydown", (event) => {
  if (event.target.matches("input[type=text]") || event.ctrlKey || event.metaKey || event.altKey) return;
  const items = pendingItems();
  const current = state.selected && items.includes(state.selected) ? state.selected : items[0];
  const key = event.key;
  if (key === "j" || key === "k") {
    if (!items.length) return;
    const index = current ? items.indexOf(current) : -1;
    const next = key === "j" ? Math.min(items.length - 1, index + 1) : Math.max(0, index - 1);
    select(items[next]);
  } else if (key === "u") {
    const button = $("#decisions button.undo");
    if (button) undo(button.dataset.undo);
  } else if (current && current.dataset.kind === "domain" && SCOPES[key.toLowerCase()]) {
    decide(current, key === key.toLowerCase() ? "allow" : "deny", SCOPES[key.toLowerCase()]);
  } else if (current && current.dataset.kind === "domain" && key === "w") {
    const box = $("input[name=wildcard]", current);
    if (box) box.checked = !box.checked;
  } else if (current && current.dataset.kind === "command" && (key === "y" || key === "n")) {
    decide(current, key === "y" ? "approve" : "deny");
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
  connect();
});
