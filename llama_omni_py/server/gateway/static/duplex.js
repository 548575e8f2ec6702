// Full-duplex page: the microphone goes to the gateway's /ws/duplex/{id} in 1 s chunks of 16 kHz
// float32 (captured by an AudioWorklet at 16 kHz), and every unit's result comes back with one
// second of 24 kHz audio -- speech, or silence while the model listens -- which is scheduled
// back to back on one Web Audio clock behind a 0.3 s playout buffer, so playback is gapless while
// results keep pace. window.omniDuplexStats exposes what happened (the browser test reads it).
"use strict";

const $ = (id) => document.getElementById(id);
// Playout buffer: the first second (and the first after an underrun) starts this late, so a
// result may come this much later than the one before it without a gap (llama-omni bench's
// duplex playback metric models the same rule).
const PLAYOUT_DELAY_S = 0.3;
const stats = window.omniDuplexStats = { sent: 0, results: 0, listens: 0, speaks: 0, audioSeconds: 0, underruns: 0,
                                         prepared: false, stopped: false, errors: [], text: "" };
let ws = null, mic = null, paused = false;

function status(text, cls) { const s = $("status"); s.textContent = text; s.className = "status " + (cls || ""); }

const player = new Player(PLAYOUT_DELAY_S);
function play(samples) { player.play(samples); stats.underruns = player.underruns; }

async function startMic() {
  mic = await startCapture(IN_RATE, sendChunk);  // one second per message
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
  if (mic) mic.stop();
  mic = null;
  $("start").disabled = false; $("stop").disabled = true; $("pause").disabled = true;
}

function start() {
  player.open();  // on the click: autoplay allows it
  const id = "adx_" + Date.now().toString(36);
  ws = new WebSocket(wsUrl("/ws/duplex/" + id));
  ws.onmessage = (m) => onMessage(JSON.parse(m.data));
  ws.onclose = async (e) => {
    teardown();
    if (!stats.stopped) status(e.code === 1000 ? "connection closed (code 1000)" : await explainClose(e.code), e.code === 1000 ? "ready" : "error");
  };
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
