// The status page: fetches /status.json every few seconds and renders it with text nodes only
// (no HTML from the server is ever parsed). Read-only.
"use strict";

const TOKEN_KEY = "octos-status-token";
const state = { refreshS: 3, timer: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child);
  return node;
}

function token() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    localStorage.setItem(TOKEN_KEY, fromHash);
    history.replaceState(null, "", location.pathname);
  }
  return localStorage.getItem(TOKEN_KEY);
}

function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text;
  box.hidden = !text;
}

function counts(mapping) {
  const entries = Object.entries(mapping || {});
  if (!entries.length) return "0";
  return entries.map(([key, value]) => `${value} ${key}`).join(", ");
}

// Each agent's turns and tokens, when the profile has several agents.
function agentFigures(agents) {
  const entries = Object.entries(agents || {});
  if (entries.length < 2) return [];
  return entries.map(([name, agent]) => {
    const tokens = agent.tokens || {};
    const used = `${tokens.input || 0} in, ${tokens.output || 0} out tokens`;
    return figure(`agent ${name}`, `${counts(agent.turns)}; ${used}`, `agent:${name}`);
  });
}

function figure(label, value, name) {
  return el("span", { "data-figure": name }, el("span", { class: "muted" }, `${label}: `), value);
}

// The profile's replies kept as dead letters: how many, and the newest with their reason.
function renderDeadLetters(deadLetters) {
  const dead = deadLetters || { count: 0, newest: [] };
  if (!dead.count) return [];
  const rows = dead.newest.map((letter) =>
    el("tr", { "data-dead-letter": letter.id },
      el("td", {}, letter.at.replace("T", " ").slice(0, 19)),
      el("td", {}, `${letter.channel}:${letter.chat_id}`),
      el("td", { class: "status down" }, letter.retrying ? `${letter.reason} (retry asked)` : letter.reason),
      el("td", {}, letter.error),
      el("td", {}, letter.id)));
  return [
    el("h3", { "data-figure": "dead_letters" },
      `${dead.count} dead letter${dead.count === 1 ? "" : "s"}`,
      el("span", { class: "muted" }, " · octos-gateway dead-letters list|retry|drop")),
    el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "given up"), el("th", {}, "chat"),
        el("th", {}, "reason"), el("th", {}, "error"), el("th", {}, "id"))),
      el("tbody", {}, ...rows)),
  ];
}

function renderProfile(profile) {
  const rows = profile.channels.map((channel) =>
    el("tr", { "data-channel": channel.name },
      el("td", {}, channel.name),
      el("td", { class: `status ${channel.status}` }, channel.status),
      el("td", {}, channel.reason || ""),
      el("td", {}, String((profile.messages_out || {})[channel.name] || 0)),
      el("td", {}, String((profile.restarts || {})[channel.name] || 0)),
      el("td", { "data-waiting": "" },
        String((profile.replies_waiting || {})[channel.name] || 0))));
  const table = el("table", {},
    el("thead", {}, el("tr", {}, el("th", {}, "channel"), el("th", {}, "health"),
      el("th", {}, "last error"), el("th", {}, "sent"), el("th", {}, "restarts"),
      el("th", { title: "replies waiting for the channel to deliver earlier ones" },
        "waiting"))),
    el("tbody", {}, ...rows));
  const queue = profile.queue || {};
  const failure = profile.failure
    ? [el("p", { class: "status down", "data-failure": "" }, `not running: ${profile.failure}`)]
    : [];
  return el("section", { class: "profile", "data-profile": profile.id },
    el("h2", {}, profile.id, el("span", { class: "muted" }, ` · agent ${profile.agent}`)),
    ...failure,
    el("div", { class: "figures" },
      figure("open sessions", String(profile.open_sessions), "sessions"),
      figure("turns", counts(profile.turns), "turns"),
      ...agentFigures(profile.agents),
      figure("messages in", counts(profile.messages_in), "messages_in"),
      figure("send errors", counts(profile.send_errors), "send_errors"),
      figure("queue", `${queue.inbound || 0} in, ${queue.outbound || 0} out`, "queue")),
    table,
    ...renderDeadLetters(profile.dead_letters));
}

function renderFailures(failures) {
  const table = document.getElementById("failures");
  const body = table.querySelector("tbody");
  body.replaceChildren(...failures.map((failure) =>
    el("tr", {},
      el("td", {}, failure.time.replace("T", " ").slice(0, 19)),
      el("td", { class: `level ${failure.level}` }, failure.level),
      el("td", {}, failure.event),
      el("td", {}, failure.detail))));
  table.hidden = failures.length === 0;
  document.getElementById("no-failures").hidden = failures.length !== 0;
}

function render(data) {
  state.refreshS = data.refresh_s || state.refreshS;
  document.getElementById("profiles").replaceChildren(...data.profiles.map(renderProfile));
  renderFailures(data.failures || []);
  document.getElementById("updated").textContent =
    `updated ${new Date().toLocaleTimeString()} · up ${data.uptime_s} s · refreshes every ${state.refreshS} s`;
  document.body.dataset.loaded = data.generated_at;
}

async function refresh() {
  const headers = {};
  const saved = token();
  if (saved) headers.Authorization = `Bearer ${saved}`;
  try {
    const response = await fetch("/status.json", { headers, cache: "no-store" });
    const data = await response.json();
    if (response.status === 401) {
      localStorage.removeItem(TOKEN_KEY);
      document.getElementById("token-form").hidden = false;
      showError(saved ? "That token was refused." : "");
      return;
    }
    if (!response.ok) {
      showError(`${data.error}: ${data.suggestion || ""}`);
      return;
    }
    document.getElementById("token-form").hidden = true;
    showError("");
    render(data);
  } catch (error) {
    showError(`The daemon does not answer (${error.message}); retrying.`);
  } finally {
    clearTimeout(state.timer);
    state.timer = setTimeout(refresh, state.refreshS * 1000);
  }
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  localStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
  refresh();
});

refresh();
