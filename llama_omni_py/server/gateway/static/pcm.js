// Audio helpers shared by the voice pages: raw float32 PCM <-> base64 (the wire's audio), the
// microphone captured at 16 kHz in fixed-size chunks (an AudioWorklet), and gapless playback of
// 24 kHz chunks on one Web Audio clock behind a short playout buffer.
"use strict";

const IN_RATE = 16000, OUT_RATE = 24000;

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

// The microphone, resampled by the browser to 16 kHz, handed to onChunk(Float32Array) every
// `samples` samples. Returns {stop()}.
async function startCapture(samples, onChunk, constraints) {
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, ...(constraints || {}) } });
  const ctx = new AudioContext({ sampleRate: IN_RATE });
  const code = `
class Capture extends AudioWorkletProcessor {
  constructor() { super(); this.buf = new Float32Array(${samples}); this.n = 0; }
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
  await ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([code], { type: "text/javascript" })));
  const node = new AudioWorkletNode(ctx, "omni-capture");
  node.port.onmessage = (e) => onChunk(e.data);
  ctx.createMediaStreamSource(stream).connect(node);
  return { stop() { stream.getTracks().forEach((t) => t.stop()); ctx.close(); } };
}

// Chunks played back to back; the first (and the first after running dry) starts `delay` s late.
class Player {
  constructor(delay) { this.delay = delay; this.ctx = null; this.playAt = 0; this.sources = []; this.underruns = 0; }
  open() { if (!this.ctx) this.ctx = new (window.AudioContext || window.webkitAudioContext)(); return this.ctx; }
  play(samples) {
    const ctx = this.open(), buf = ctx.createBuffer(1, samples.length, OUT_RATE);
    buf.copyToChannel(samples, 0);
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(ctx.destination);
    if (this.playAt < ctx.currentTime) {
      if (this.playAt > 0) this.underruns++;
      this.playAt = ctx.currentTime + this.delay;
    }
    src.start(this.playAt);
    this.playAt += buf.duration;
    this.sources.push(src);
    src.onended = () => { this.sources = this.sources.filter((s) => s !== src); };
  }
  // Seconds still to play.
  remaining() { return this.ctx ? Math.max(0, this.playAt - this.ctx.currentTime) : 0; }
  // Stops what is playing and what is scheduled (barge-in); returns the seconds that were cut.
  cut() {
    const left = this.remaining();
    this.sources.forEach((s) => { try { s.stop(); } catch (e) { /* already ended */ } });
    this.sources = [];
    this.playAt = 0;
    return left;
  }
}
