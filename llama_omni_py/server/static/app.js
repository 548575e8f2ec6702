// Demo page for the llama-omni-py server: one turn_based session over WS /backend, text or
// microphone/file input, text deltas shown as they arrive, audio deltas (float32 24 kHz)
// scheduled back to back on one Web Audio clock so playback is gapless. window.omniStats
// exposes what was received (the browser test reads it).
"use strict";

const $ = (id) => document.getElementById(id);
const OUT_RATE = 24000, IN_RATE = 16000;
const stats = window.omniStats = { audioSeconds: 0, audioChunks: 0, decodedChunks: 0, textDeltas: 0,
                                   done: 0, ttfaMs: null, rtf: null, closed: null, sessionId: null };
let ws = null, ctx = null, playAt = 0, sentAt = 0, lastAudioAt = 0, turnAudio = 0, attachment = null;

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
  if (ev.type === "session.created") { stats.sessionId = ev.session_id; status("ready · session " + ev.session_id.slice(0, 8), "ready"); }
  else if (ev.type === "response.output.delta" && ev.kind === "text") { stats.textDeltas += 1; $("reply").textContent += ev.text; }
  else if (ev.type === "response.output.delta" && ev.kind === "audio") onAudio(ev.audio);
  else if (ev.type === "response.done") {
    stats.done += 1;
    if (ev.audio) onAudio(ev.audio);
    if (!$("reply").textContent) $("reply").textContent = ev.text;
    $("send").disabled = false;
  } else if (ev.type === "session.closed") {
    stats.closed = ev;
    const box = $("closed");
    box.hidden = false;
    box.textContent = "session closed: " + ev.reason + (ev.diagnostic ? "\n" + ev.diagnostic.message : "");
  }
}

function connect() {
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/backend";
  status("connecting…");
  ws = new WebSocket(url);
  ws.onopen = () => ws.send(JSON.stringify({ type: "session.init", payload: { mode: "turn_based" } }));
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = (e) => {
    status("disconnected (" + (stats.closed ? stats.closed.reason : "code " + e.code) + "); reconnecting…", "error");
    $("send").disabled = false;
    setTimeout(connect, 2000);  // a closed session is never resumed: start a fresh one
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
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
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
  ws.send(JSON.stringify({ type: "input.append", input: {
    messages: [{ role: "user", content }], streaming: $("streaming").checked,
    tts: { enabled: $("tts").checked } } }));
  attachment = null; $("attached").textContent = "";
  $("send").disabled = true;
}

$("send").onclick = send;
$("record").onclick = () => toggleRecord().catch((e) => { $("attached").textContent = "microphone: " + e; });
$("file").onchange = (e) => e.target.files[0] && attach(e.target.files[0]).catch((err) => { $("attached").textContent = String(err); });
connect();
