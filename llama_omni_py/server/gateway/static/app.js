// The chat page of the llama-omni-py gateway: each turn is one request on WS /ws/chat (the demo's
// turn-based chat API), so the page holds no engine between turns; while every engine is busy it
// shows the queue position and estimated wait. Text or microphone/file input, text shown as it
// arrives, audio chunks (float32 24 kHz) scheduled back to back on one Web Audio clock so
// playback is gapless. window.omniStats exposes what was received (the browser test reads it).
"use strict";

const $ = (id) => document.getElementById(id);
const OUT_RATE = 24000, IN_RATE = 16000;
const stats = window.omniStats = { audioSeconds: 0, audioChunks: 0, decodedChunks: 0, textDeltas: 0,
                                   done: 0, ttfaMs: null, rtf: null, queued: 0, errors: [] };
const history = [];  // earlier turns' text, sent with each request (the server keeps no session)
let ctx = null, playAt = 0, sentAt = 0, lastAudioAt = 0, turnAudio = 0, attachment = null, pendingUser = "";

function status(text, cls) { const s = $("status"); s.textContent = text; s.className = "status " + (cls || ""); }

function b64ToFloat32(b64) {
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Float32Array(bytes.buffer);
}
function float32ToB64(f32) {
  const bytes = new Uint8Array(f32.buffer, f32.byteOffset, f32.byteLength);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}
function bytesToB64(buf) { return float32ToB64(new Uint8Array(buf)); }

function audioContext() {
  if (!ctx) ctx = new (window.AudioContext || window.webkitAudioContext)();
  if (ctx.state === "suspended") ctx.resume();
  return ctx;
}

function play(samples) {
  // Each chunk starts where the previous one ends (no gap, no overlap).
  const c = audioContext();
  const buf = c.createBuffer(1, samples.length, OUT_RATE);
  buf.copyToChannel(samples, 0);
  const src = c.createBufferSource();
  src.buffer = buf;
  src.connect(c.destination);
  playAt = Math.max(playAt, c.currentTime + 0.05);
  src.start(playAt);
  playAt += buf.duration;
  stats.decodedChunks += 1;
}

function showAudio() {
  const el = $("audio-received");
  el.textContent = stats.audioSeconds.toFixed(2) + " s";
  el.dataset.seconds = stats.audioSeconds.toFixed(3);
  el.dataset.chunks = String(stats.audioChunks);
}

function onAudio(b64) {
  const samples = b64ToFloat32(b64);
  if (!samples.length) return;
  const now = performance.now();
  if (stats.ttfaMs === null) { stats.ttfaMs = now - sentAt; $("ttfa").textContent = (stats.ttfaMs / 1000).toFixed(2) + " s"; }
  lastAudioAt = now;
  turnAudio += samples.length / OUT_RATE;
  stats.audioSeconds += samples.length / OUT_RATE;
  stats.audioChunks += 1;
  stats.rtf = (lastAudioAt - sentAt) / 1000 / turnAudio;
  $("rtf").textContent = stats.rtf.toFixed(2);
  showAudio();
  play(samples);
}

function onEvent(ev) {
  if (ev.type === "queued" || ev.type === "queue_update") {
    stats.queued += ev.type === "queued" ? 1 : 0;
    status("waiting for a free engine: position " + ev.position + " of " + ev.queue_length +
           ", about " + Math.round(ev.estimated_wait_s) + " s", "queued");
  } else if (ev.type === "queue_done") status("your turn", "ready");
  else if (ev.type === "prefill_done") status("answering…", "ready");
  else if (ev.type === "chunk" && ev.text_delta) { stats.textDeltas += 1; $("reply").textContent += ev.text_delta; }
  else if (ev.type === "chunk" && ev.audio_data) onAudio(ev.audio_data);
  else if (ev.type === "done") {
    stats.done += 1;
    if (ev.audio_data) onAudio(ev.audio_data);
    if (!$("reply").textContent) $("reply").textContent = ev.text;
    history.push({ role: "user", content: pendingUser }, { role: "assistant", content: ev.text });
    status("ready", "ready");
  } else if (ev.type === "error") {
    stats.errors.push(ev.error);
    const box = $("closed");
    box.hidden = false;
    box.textContent = "error: " + ev.error;
    status("ready", "ready");
  }
}

function request(content) {
  // One WebSocket per turn: the page holds no engine while the user reads or types.
  const ws = new WebSocket(wsUrl("/ws/chat"));
  const body = { messages: history.concat([{ role: "user", content }]), streaming: $("streaming").checked,
                 tts: { enabled: $("tts").checked } };
  pendingUser = content.filter((c) => c.type === "text").map((c) => c.text).join("");
  ws.onopen = () => { status("sent", "ready"); ws.send(JSON.stringify(body)); };
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = async (e) => {
    $("send").disabled = false;
    if (e.code !== 1000 && e.code !== 1008) status(await explainClose(e.code), "error");  // 1008: an error said why
  };
}

async function toMono16k(arrayBuffer) {
  const decoded = await audioContext().decodeAudioData(arrayBuffer);
  const n = Math.max(1, Math.round(decoded.duration * IN_RATE));
  const off = new OfflineAudioContext(1, n, IN_RATE);
  const src = off.createBufferSource();
  src.buffer = decoded;
  src.connect(off.destination);
  src.start();
  return (await off.startRendering()).getChannelData(0).slice(0, 30 * IN_RATE);  // the server takes 30 s
}

async function attach(file) {
  const data = await file.arrayBuffer();
  if (file.type.startsWith("audio/")) attachment = { type: "audio", data: float32ToB64(await toMono16k(data)) };
  else if (file.type === "video/mp4") attachment = { type: "video", data: bytesToB64(data), stack_frames: 1 };
  else if (file.type === "image/jpeg" || file.type === "image/png") attachment = { type: "image", data: bytesToB64(data) };
  else { attachment = null; $("attached").textContent = "unsupported file type " + file.type; return; }
  $("attached").textContent = "attached: " + file.name + " (" + attachment.type + ")";
}

let recorder = null;
async function toggleRecord() {
  if (recorder) { recorder.stop(); return; }
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const parts = [];
  recorder = new MediaRecorder(stream);
  recorder.ondataavailable = (e) => parts.push(e.data);
  recorder.onstop = async () => {
    stream.getTracks().forEach((t) => t.stop());
    recorder = null;
    $("record").textContent = "● Record";
    const blob = new Blob(parts);
    attachment = { type: "audio", data: float32ToB64(await toMono16k(await blob.arrayBuffer())) };
    $("attached").textContent = "attached: microphone recording";
  };
  recorder.start();
  $("record").textContent = "■ Stop";
}

function send() {
  audioContext();  // created on the click, so autoplay policies let it run
  const content = [];
  if (attachment) content.push(attachment);
  const text = $("text").value.trim();
  if (text) content.push({ type: "text", text });
  if (!content.length) return;
  $("reply").textContent = "";
  $("closed").hidden = true;
  stats.ttfaMs = null; turnAudio = 0;
  $("ttfa").textContent = "–"; $("rtf").textContent = "–";
  sentAt = performance.now();
  request(content);
  attachment = null; $("attached").textContent = "";
  $("send").disabled = true;
}

$("send").onclick = send;
$("record").onclick = () => toggleRecord().catch((e) => { $("attached").textContent = "microphone: " + e; });
$("file").onchange = (e) => e.target.files[0] && attach(e.target.files[0]).catch((err) => { $("attached").textContent = String(err); });
status("ready", "ready");
