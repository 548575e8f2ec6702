// Full-duplex page: the microphone goes to the gateway's /ws/duplex/{id} in 1 s chunks of 16 kHz
// float32 (captured by an AudioWorklet at 16 kHz), and every unit's result comes back with one
// second of 24 kHz audio -- speech, or silence while the model listens -- which is scheduled
// back to back on one Web Audio clock behind a 0.3 s playout buffer, so playback is gapless while
// results keep pace. window.omniDuplexStats exposes what happened (the browser test reads it).
"use strict";

const $ = (id) => document.getElementById(id);
const IN_RATE = 16000, OUT_RATE = 24000;
// Playout buffer: the first second (and the first after an underrun) starts this late, so a
// result may come this much later than the one before it without a gap (llama-omni bench's
// duplex playback metric models the same rule).
const PLAYOUT_DELAY_S = 0.3;
const stats = window.omniDuplexStats = { sent: 0, results: 0, listens: 0, speaks: 0, audioSeconds: 0, underruns: 0,
                                         prepared: false, stopped: false, errors: [], text: "" };
let ws = null, micCtx = null, micStream = null, out = null, playAt = 0, paused = false;

function status(text, cls) { const s = $("status"); s.textContent = text; s.className = "status " + (cls || ""); }

function float32ToB64(f32) {
  const bytes = new Uint8Array(f32.buffer, f32.byteOffset, f32.byteLength);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}
function b64ToFloat32(b64) {
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Float32Array(bytes.buffer);
}

function play(samples) {
  if (!out) out = new (window.AudioContext || window.webkitAudioContext)();
  const buf = out.createBuffer(1, samples.length, OUT_RATE);
  buf.copyToChannel(samples, 0);
  const src = out.createBufferSource();
  src.buffer = buf;
  src.connect(out.destination);
  if (playAt < out.currentTime) {  // empty (first second, or an underrun): buffer again
    if (playAt > 0) stats.underruns++;
    playAt = out.currentTime + PLAYOUT_DELAY_S;
  }
  src.start(playAt);
  playAt += buf.duration;
}

// Collects the microphone into exactly one second of samples per message.
const CAPTURE = `
class Capture extends AudioWorkletProcessor {
  constructor() { super(); this.buf = new Float32Array(${IN_RATE}); this.n = 0; }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) for (let i = 0; i < ch.length; i++) {
      this.buf[this.n++] = ch[i];
      if (this.n === this.buf.length) { this.port.postMessage(this.buf.slice(0)); this.n = 0; }
    }
    return true;
  }
}
registerProcessor("omni-capture", Capture);`;

async function startMic() {
  micStream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 } });
  micCtx = new AudioContext({ sampleRate: IN_RATE });  // the browser resamples the microphone
  const url = URL.createObjectURL(new Blob([CAPTURE], { type: "text/javascript" }));
  await micCtx.audioWorklet.addModule(url);
  const node = new AudioWorkletNode(micCtx, "omni-capture");
  node.port.onmessage = (e) => sendChunk(e.data);
  micCtx.createMediaStreamSource(micStream).connect(node);
}

function sendChunk(samples) {
  if (!ws || ws.readyState !== WebSocket.OPEN || paused || !stats.prepared) return;  // dropped, not buffered
  const msg = { type: "audio_chunk", audio_base64: float32ToB64(samples) };
  if ($("force-listen").checked) msg.force_listen = true;
  ws.send(JSON.stringify(msg));
  stats.sent += 1;
}

function onResult(r) {
  stats.results += 1;
  $("units").textContent = r.current_time;
  $("cost").textContent = r.cost_all_ms ? (r.cost_all_ms / 1000).toFixed(2) + " s" : "–";
  if (r.is_listen) { stats.listens += 1; $("listens").textContent = stats.listens; }
  else {
    stats.speaks += 1; $("speaks").textContent = stats.speaks;
    if (r.text) { stats.text += r.text; $("reply").textContent += r.text; }
    if (r.end_of_turn) $("reply").textContent += "\n";
  }
  if (r.audio_data) {
    const samples = b64ToFloat32(r.audio_data);
    stats.audioSeconds += samples.length / OUT_RATE;
    $("audio").textContent = stats.audioSeconds.toFixed(2) + " s";
    play(samples);
  }
}

function onMessage(ev) {
  if (ev.type === "queued" || ev.type === "queue_update") {
    status("waiting for a free engine: position " + ev.position + ", about " + Math.round(ev.estimated_wait_s) + " s", "queued");
  } else if (ev.type === "queue_done") {
    ws.send(JSON.stringify({ type: "prepare", system_prompt: $("system").value }));
    status("preparing…", "ready");
  } else if (ev.type === "prepared") {
    stats.prepared = true;
    status("listening — talk", "ready");
    startMic().catch((e) => { stats.errors.push(String(e)); status("microphone: " + e, "error"); });
  } else if (ev.type === "result") onResult(ev);
  else if (ev.type === "paused") status("paused", "queued");
  else if (ev.type === "resumed") status("listening — talk", "ready");
  else if (ev.type === "stopped" || ev.type === "timeout") { stats.stopped = true; status(ev.type, "ready"); }
  else if (ev.type === "error") {
    stats.errors.push(ev.error);
    const box = $("closed"); box.hidden = false; box.textContent = "error: " + ev.error;
  }
}

function teardown() {
  if (micStream) micStream.getTracks().forEach((t) => t.stop());
  if (micCtx) micCtx.close();
  micStream = micCtx = null;
  $("start").disabled = false; $("stop").disabled = true; $("pause").disabled = true;
}

function start() {
  if (!out) out = new (window.AudioContext || window.webkitAudioContext)();  // on the click: autoplay allows it
  const id = "adx_" + Date.now().toString(36);
  const key = new URLSearchParams(location.search).get("api_key");  // as on the chat page
  ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/duplex/" + id +
    (key ? "?api_key=" + encodeURIComponent(key) : ""));
  ws.onmessage = (m) => onMessage(JSON.parse(m.data));
  ws.onclose = (e) => { teardown(); if (!stats.stopped) status("connection closed (code " + e.code + ")", e.code === 1000 ? "ready" : "error"); };
  $("start").disabled = true; $("stop").disabled = false; $("pause").disabled = false;
  status("connecting…", "ready");
}

function stop() {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "stop" }));
  teardown();
}

function togglePause() {
  paused = !paused;
  ws.send(JSON.stringify({ type: paused ? "pause" : "resume" }));
  $("pause").textContent = paused ? "Resume" : "Pause";
}

$("start").onclick = start;
$("stop").onclick = stop;
$("pause").onclick = togglePause;
