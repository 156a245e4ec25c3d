// The web chat: streams replies from POST /v1/chat (server-sent events) as they grow.
"use strict";

const CHAT_KEY = "octos.chat_id";
const TOKEN_KEY = "octos.token";
const log = document.getElementById("log");
const input = document.getElementById("input");
const form = document.getElementById("composer");
const sendButton = document.getElementById("send");
const errorBox = document.getElementById("error");

function chatId() {
  let id = localStorage.getItem(CHAT_KEY);
  if (!id) {
    id = "web-" + crypto.randomUUID().slice(0, 8);
    localStorage.setItem(CHAT_KEY, id);
  }
  document.getElementById("chat-label").textContent = "chat " + id;
  return id;
}

function headers() {
  const result = { "Content-Type": "application/json" };
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) result.Authorization = "Bearer " + token;
  return result;
}

function showError(text) {
  errorBox.textContent = text;
  errorBox.hidden = !text;
}

function bubble(role, text) {
  const element = document.createElement("div");
  element.className = "message " + role;
  element.textContent = text;
  log.appendChild(element);
  log.scrollTop = log.scrollHeight;
  return element;
}

async function askForToken() {
  const dialog = document.getElementById("token-dialog");
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  localStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
}

async function api(path, options = {}) {
  let response = await fetch(path, { ...options, headers: headers() });
  if (response.status === 401) {
    await askForToken();
    response = await fetch(path, { ...options, headers: headers() });
  }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).error || detail; } catch (_) { /* not JSON */ }
    throw new Error(`HTTP ${response.status}: ${detail}`);
  }
  return response;
}

async function loadHistory() {
  log.replaceChildren();
  // Busy until the history is shown, so assistive technology (and tests) know when it is final.
  log.setAttribute("aria-busy", "true");
  try {
    const response = await api(`/v1/sessions/${encodeURIComponent(chatId())}/messages`);
    const body = await response.json();
    for (const message of body.messages) {
      if (message.role === "user" || message.role === "assistant") bubble(message.role, message.content);
    }
    showError("");
  } catch (error) {
    showError("Could not load the history: " + error.message);
  } finally {
    log.setAttribute("aria-busy", "false");
  }
}

// Reads "event: x\ndata: {...}\n\n" frames from a fetch body.
async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let kind = "message";
      let data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      yield { kind, data: data ? JSON.parse(data) : {} };
    }
  }
}

async function send(text) {
  bubble("user", text);
  const reply = bubble("assistant streaming", "");
  sendButton.disabled = true;
  showError("");
  try {
    const response = await api("/v1/chat", {
      method: "POST",
      body: JSON.stringify({ chat_id: chatId(), content: text, stream: true }),
    });
    for await (const event of serverEvents(response)) {
      reply.textContent = event.data.text ?? reply.textContent;
      log.scrollTop = log.scrollHeight;
      if (event.kind === "error") { reply.classList.add("failed"); showError(event.data.text); }
      if (event.kind !== "snapshot") break;
    }
  } catch (error) {
    reply.classList.add("failed");
    showError("Sending failed: " + error.message);
  } finally {
    reply.classList.remove("streaming");
    sendButton.disabled = false;
    input.focus();
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  send(text);
});

input.addEventListener("keydown", (event) => {
  // Enter while an input method is composing (Chinese, Japanese...) picks a candidate; it must not send.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});

document.getElementById("new-chat").addEventListener("click", () => {
  localStorage.removeItem(CHAT_KEY);
  loadHistory();
});

loadHistory();
