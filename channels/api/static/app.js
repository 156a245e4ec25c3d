// The web chat: streams replies from POST /v1/chat (server-sent events) as they grow, renders
// the agent's Markdown safely (markdown-it with raw HTML off), lists the chat's topics.
"use strict";

const CHAT_KEY = "octos.chat_id";
const TOKEN_KEY = "octos.token";
const log = document.getElementById("log");
const input = document.getElementById("input");
const fileInput = document.getElementById("files");
const form = document.getElementById("composer");
const sendButton = document.getElementById("send");
const stopButton = document.getElementById("stop");
const errorBox = document.getElementById("error");
const emptyNote = document.getElementById("empty");
const topicSelect = document.getElementById("topics");

// Raw HTML in a reply is shown as text, never parsed; markdown-it refuses javascript: links.
const markdown = window.markdownit({ html: false, linkify: true, breaks: true });
const defaultLinkOpen = markdown.renderer.rules.link_open ||
  ((tokens, index, options, _env, self) => self.renderToken(tokens, index, options));
markdown.renderer.rules.link_open = (tokens, index, options, env, self) => {
  tokens[index].attrSet("target", "_blank");
  tokens[index].attrSet("rel", "noopener noreferrer");
  return defaultLinkOpen(tokens, index, options, env, self);
};

// crypto.randomUUID exists only on secure origins (https, localhost); a server reached by IP
// over http has getRandomValues only.
function randomId() {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID().slice(0, 8);
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

function chatId() {
  let id = localStorage.getItem(CHAT_KEY);
  if (!id) {
    id = "web-" + randomId();
    localStorage.setItem(CHAT_KEY, id);
  }
  document.getElementById("chat-label").textContent = "chat " + id;
  return id;
}

function storedToken() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

function headers(token) {
  const result = { "Content-Type": "application/json" };
  if (token) result.Authorization = "Bearer " + token;
  return result;
}

function showError(text) {
  errorBox.textContent = text;
  errorBox.hidden = !text;
}

function render(element, role, text) {
  if (role.startsWith("assistant")) element.innerHTML = markdown.render(text).trim();
  else element.textContent = text;
  element.dataset.text = text;
}

function bubble(role, text, files = []) {
  const element = document.createElement("div");
  element.className = "message " + role;
  render(element, role, text);
  log.appendChild(element);
  showFiles(element, files);
  log.scrollTop = log.scrollHeight;
  emptyNote.hidden = true;
  return element;
}

// A link that opens `href` in a new tab; `rel` is "noopener" at least, so the page opened gets
// no handle on this one.
function newTabLink(href, text, rel) {
  const link = document.createElement("a");
  link.href = href;
  link.textContent = text;
  link.target = "_blank";
  link.rel = rel;
  return link;
}

// A message's files under it: images inline, other files as links (a file without a link,
// as its name).
function showFiles(element, files) {
  for (const file of files) {
    const box = document.createElement("div");
    box.className = "attachment";
    if (file.url && file.kind === "image") {
      const image = document.createElement("img");
      image.src = file.url;
      image.alt = file.name;
      box.appendChild(image);
    } else if (file.url) {
      box.appendChild(newTabLink(file.url, file.name, "noopener"));
    } else box.textContent = "\u{1F4CE} " + file.name;
    element.after(box);
    element = box;
  }
}

// The chosen files as the API takes them: base64 data with the name and type.
async function chosenFiles() {
  const read = Array.from(fileInput.files, (file) => new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({
      name: file.name,
      mime: file.type || undefined,
      data: reader.result.slice(reader.result.indexOf(",") + 1),
    });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  }));
  return Promise.all(read);
}

// The open token dialog, shared by every request refused meanwhile: one dialog, not one each.
let tokenPrompt = null;

// Resolves to the token entered (and stored), or null when the dialog was dismissed (Escape).
function askForToken(refused) {
  if (tokenPrompt) return tokenPrompt;
  const dialog = document.getElementById("token-dialog");
  const field = document.getElementById("token-input");
  document.getElementById("token-refused").hidden = !refused;
  field.value = "";
  dialog.returnValue = "";
  dialog.showModal();
  tokenPrompt = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      tokenPrompt = null;
      const token = field.value.trim();
      if (dialog.returnValue !== "saved" || !token) { resolve(null); return; }
      localStorage.setItem(TOKEN_KEY, token);
      resolve(token);
    }, { once: true });
  });
  return tokenPrompt;
}

// Set while the chat's history is not shown because loading it failed (a refused token).
let historyMissing = false;
// Set when the history is to be shown once the running reply ends (it would replace it).
let historyAfterReply = false;

// A token the gateway took after a 401: the errors the refusals left are stale now, and the
// history they kept from loading is shown.
function tokenAccepted() {
  showError("");
  if (!historyMissing) return;
  if (running === null) loadHistory();
  else historyAfterReply = true;
}

// A request to the gateway; on 401 it asks for the token, again while the gateway refuses it,
// until the gateway takes one or the user dismisses the dialog.
async function api(path, options = {}) {
  let asked = false;
  let response;
  for (;;) {
    const token = storedToken();
    response = await fetch(path, { ...options, headers: headers(token) });
    if (response.status !== 401) break;
    // Another request's dialog may have stored a new token while this one was on its way.
    if (storedToken() === token && await askForToken(token !== "") === null) {
      throw new Error(token ? "HTTP 401: the gateway refused the token" : "HTTP 401: the gateway needs an access token");
    }
    asked = true;
  }
  if (asked && response.ok) tokenAccepted();
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).error || detail; } catch (_) { /* not JSON */ }
    throw Object.assign(new Error(`HTTP ${response.status}: ${detail}`),
      { status: response.status, detail });
  }
  return response;
}

async function showWhoAnswers() {
  try {
    const info = await (await api("/v1/info")).json();
    const what = info.agent === "echo" ? "the echo agent (it repeats what you write)"
      : `the ${info.agent} agent`;
    emptyNote.textContent = `Profile ${info.profile}: your messages are answered by ${what}.`;
  } catch (_) {
    emptyNote.textContent = "Write a message to start.";
  }
  emptyNote.hidden = log.children.length > 0;
}

async function loadTopics() {
  try {
    const body = await (await api("/v1/sessions")).json();
    const mine = body.sessions.filter((session) => session.chat_id === chatId());
    const names = new Set(["default", ...mine.map((session) => session.topic || "default")]);
    const chosen = topicSelect.value || localStorage.getItem(CHAT_KEY + ".topic") || "default";
    topicSelect.replaceChildren(...Array.from(names, (name) => new Option(name, name)));
    topicSelect.value = names.has(chosen) ? chosen : "default";
  } catch (_) { /* the topics are a convenience */ }
}

async function loadHistory() {
  log.replaceChildren();
  // Busy until the history is shown, so assistive technology (and tests) know when it is final.
  log.setAttribute("aria-busy", "true");
  historyMissing = false;
  try {
    const response = await api(`/v1/sessions/${encodeURIComponent(chatId())}/messages`);
    const body = await response.json();
    for (const message of body.messages) {
      if (message.role === "user" || message.role === "assistant") {
        bubble(message.role, message.content, message.attachments || []);
      }
    }
    showError("");
  } catch (error) {
    historyMissing = true;
    showError("Could not load the history: " + error.message);
  } finally {
    log.setAttribute("aria-busy", "false");
  }
  // Without the history (a dismissed token dialog), asking for more would only ask again.
  if (historyMissing) return;
  await Promise.all([showWhoAnswers(), loadTopics()]);
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

// A command or the abort word, answered in one JSON reply and shown as a note.
async function command(text) {
  const response = await api("/v1/chat", {
    method: "POST",
    body: JSON.stringify({ chat_id: chatId(), content: text }),
  });
  const body = await response.json();
  bubble("note", body.reply);
  return body.reply;
}

// The running reply's request: Stop ends it once the gateway has cancelled the turn.
let running = null;
// Set while Stop is being handled: the gateway ends the cancelled reply's stream with an
// error event, which then means "stopped", not "failed".
let stopRequested = false;

// A reply's buttons under it: a tap sends the button's label with its data (`callback`), once;
// a link button opens its page.
function showButtons(reply, rows, messageId) {
  const box = document.createElement("div");
  box.className = "buttons";
  for (const row of rows) {
    const line = document.createElement("div");
    line.className = "button-row";
    for (const button of row) {
      if (button.url) {
        line.append(newTabLink(button.url, button.text, "noopener noreferrer"));
        continue;
      }
      const tap = document.createElement("button");
      tap.type = "button";
      tap.textContent = button.text;
      tap.addEventListener("click", () => {
        for (const used of box.querySelectorAll("button")) used.disabled = true;
        send(button.text, [], { data: button.data, message_id: messageId });
      });
      line.append(tap);
    }
    box.append(line);
  }
  reply.after(box);
}

async function send(text, attachments, callback = null) {
  bubble("user", text, attachments.map((file) => ({ name: file.name, kind: "file" })));
  const reply = bubble("assistant streaming", "");
  sendButton.disabled = true;
  stopButton.hidden = false;
  showError("");
  running = new AbortController();
  try {
    const response = await api("/v1/chat", {
      method: "POST",
      body: JSON.stringify({
        chat_id: chatId(),
        content: text,
        stream: true,
        attachments,
        ...(callback ? { callback } : {}),
      }),
      signal: running.signal,
    });
    for await (const event of serverEvents(response)) {
      if (event.kind === "error" && stopRequested) { reply.classList.add("stopped"); break; }
      if (event.data.text !== undefined) render(reply, "assistant", event.data.text);
      log.scrollTop = log.scrollHeight;
      if (event.kind === "error") { reply.classList.add("failed"); showError(event.data.text); }
      if (event.data.attachments) showFiles(reply, event.data.attachments);
      if (event.kind === "done" && event.data.buttons) {
        showButtons(reply, event.data.buttons, event.data.message_id);
      }
      if (event.kind !== "snapshot") break;
    }
  } catch (error) {
    if (error.name === "AbortError") {
      reply.classList.add("stopped");
    } else if (error.status === 403) {
      // This chat id is not on the allow list: the gateway's notice (the id to give the
      // owner, or a pairing code) is all the answer there is, and it is meant for the reader.
      reply.className = "message note refused";
      render(reply, "note", error.detail);
    } else {
      reply.classList.add("failed");
      showError("Sending failed: " + error.message);
    }
  } finally {
    running = null;
    stopRequested = false;
    reply.classList.remove("streaming");
    sendButton.disabled = false;
    stopButton.hidden = true;
    input.focus();
    if (historyAfterReply) {
      historyAfterReply = false;
      loadHistory();
    } else loadTopics();
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = input.value.trim();
  if (!text && !fileInput.files.length) return;
  let attachments;
  try {
    attachments = await chosenFiles();
  } catch (error) { showError("Reading the file failed: " + error.message); return; }
  input.value = "";
  fileInput.value = "";
  send(text, attachments);
});

input.addEventListener("keydown", (event) => {
  // Enter while an input method is composing (Chinese, Japanese...) picks a candidate; it must not send.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});

// "stop" sent as a message of its own: the gateway cancels the running turn at once.
stopButton.addEventListener("click", async () => {
  const stopping = running;
  stopRequested = stopping !== null;
  try {
    await command("stop");
    if (stopping) stopping.abort();
  } catch (error) { showError("Stopping failed: " + error.message); }
});

topicSelect.addEventListener("change", async () => {
  const topic = topicSelect.value;
  localStorage.setItem(CHAT_KEY + ".topic", topic);
  try {
    await command("/s " + topic);
    await loadHistory();
  } catch (error) { showError("Switching failed: " + error.message); }
});

document.getElementById("new-topic").addEventListener("click", async () => {
  const name = window.prompt("Name of the new topic (letters, digits, - and _):");
  if (!name) return;
  try {
    await command("/new " + name.trim());
    localStorage.setItem(CHAT_KEY + ".topic", name.trim());
    await loadTopics();
    topicSelect.value = name.trim();
  } catch (error) { showError("Creating the topic failed: " + error.message); }
});

document.getElementById("new-chat").addEventListener("click", () => {
  localStorage.removeItem(CHAT_KEY);
  localStorage.removeItem(CHAT_KEY + ".topic");
  topicSelect.value = "";
  loadHistory();
});

loadHistory();
