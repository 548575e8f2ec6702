// Hands-free voice page: the microphone goes to the gateway's /ws/half_duplex/{id} in 0.5 s chunks
// of 16 kHz float32; the server's voice activity detector decides when the user has finished,
// and the reply streams back as chunks of text and 24 kHz audio, played gapless. With barge-in
// on the microphone stays open while the reply plays (the browser's echo cancellation keeps the
// reply out of it) and talking over the reply cuts it, here and on the server; off, the page does
// what the demo's page does: it stops sending while the reply plays and 800 ms after.
// window.omniHalfDuplexStats exposes what happened (the browser test reads it).
"use strict";

const $ = (id) => document.getElementById(id);
const CHUNK = IN_RATE / 2, RESUME_AFTER_S = 0.8;
const stats = window.omniHalfDuplexStats = { sent: 0, speechStarts: 0, speechStops: 0, turns: 0, interrupted: 0,
  chunks: 0, audioSeconds: 0, prepared: false, stopped: false, errors: [], latencies: [], texts: [] };
const player = new Player(0.1);
let ws = null, mic = null, replying = false, quietUntil = 0, stoppedAt = 0, firstAudio = false;

function status(text, cls) { const s = $("status"); s.textContent = text; s.className = "status " + (cls || ""); }

function listening() {
  if ($("barge-in").checked) return true;
  return !replying && player.remaining() === 0 && performance.now() / 1000 >= quietUntil;
}

function sendChunk(samples) {
  if (!ws || ws.readyState !== WebSocket.OPEN || !stats.prepared || !listening()) return;
  ws.send(JSON.stringify({ type: "audio_chunk", audio_base64: float32ToB64(samples) }));
  stats.sent += 1;
}

function onMessage(ev) {
  if (ev.type === "queued" || ev.type === "queue_update") {
    status("waiting for a free engine: position " + ev.position + ", about " + Math.round(ev.estimated_wait_s) + " s", "queued");
  } else if (ev.type === "queue_done") {
    ws.send(JSON.stringify({ type: "prepare", system_prompt: $("system").value, config: {
      vad: { threshold: Number($("threshold").value), min_silence_duration_ms: Number($("silence").value) },
      session: { timeout_s: 180 } } }));
    status("preparing…", "ready");
  } else if (ev.type === "prepared") {
    stats.prepared = true;
    status("listening — talk", "ready");
    startCapture(CHUNK, sendChunk, { echoCancellation: true, noiseSuppression: true })
      .then((m) => { mic = m; })
      .catch((e) => { stats.errors.push(String(e)); status("microphone: " + e, "error"); });
  } else if (ev.type === "vad_state") {
    $("vad").textContent = ev.speaking ? "speaking" : "quiet";
    if (ev.speaking) {
      stats.speechStarts++;
      if (replying || player.remaining() > 0) player.cut();  // barge-in: stop talking at once
    } else { stats.speechStops++; stoppedAt = performance.now(); }
  } else if (ev.type === "generating") {
    replying = true; firstAudio = false;
    status("answering…", "ready");
  } else if (ev.type === "chunk") {
    stats.chunks++;
    if (ev.text_delta) $("reply").textContent += ev.text_delta;
    if (ev.audio_data) {
      const samples = b64ToFloat32(ev.audio_data);
      if (!firstAudio) {
        firstAudio = true;
        const ms = performance.now() - stoppedAt;
        stats.latencies.push(ms);
        $("latency").textContent = (ms / 1000).toFixed(2) + " s";
      }
      stats.audioSeconds += samples.length / OUT_RATE;
      $("audio").textContent = stats.audioSeconds.toFixed(2) + " s";
      player.play(samples);
    }
  } else if (ev.type === "turn_done") {
    replying = false;
    stats.turns++; stats.texts.push(ev.text);
    if (ev.interrupted) stats.interrupted++;
    $("turns").textContent = ev.turn_index;
    $("reply").textContent += ev.interrupted ? " …\n" : "\n";
    quietUntil = performance.now() / 1000 + player.remaining() + RESUME_AFTER_S;
    status("listening — talk", "ready");
  } else if (ev.type === "stopped" || ev.type === "timeout") {
    stats.stopped = true; status(ev.type === "timeout" ? "ended: nobody spoke for a while" : "stopped", "ready");
  } else if (ev.type === "error") {
    stats.errors.push(ev.error);
    const box = $("closed"); box.hidden = false; box.textContent = "error: " + ev.error;
  }
}

function teardown() {
  if (mic) mic.stop();
  mic = null;
  $("start").disabled = false; $("stop").disabled = true; $("cut").disabled = true;
}

function start() {
  player.open();  // on the click: autoplay allows it
  const id = "hdx_" + Date.now().toString(36);
  ws = new WebSocket(wsUrl("/ws/half_duplex/" + id));
  ws.sessionId = id;
  ws.onmessage = (m) => onMessage(JSON.parse(m.data));
  ws.onclose = async (e) => {
    teardown();
    if (!stats.stopped) status(e.code === 1000 ? "connection closed (code 1000)" : await explainClose(e.code), e.code === 1000 ? "ready" : "error");
  };
  $("start").disabled = true; $("stop").disabled = false; $("cut").disabled = false;
  status("connecting…", "ready");
}

function stop() {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "stop" }));
  player.cut();
  teardown();
}

function cutReply() {  // the demo's stop button: POST /api/half_duplex/stop
  if (!ws) return;
  player.cut();
  fetch("/api/half_duplex/stop", { method: "POST", body: JSON.stringify({ session_id: ws.sessionId }),
    headers: { "Content-Type": "application/json", ...(omniKey ? { Authorization: "Bearer " + omniKey } : {}) } });
}

$("start").onclick = start;
$("stop").onclick = stop;
$("cut").onclick = cutReply;
