"""Reference audio encoder: transformers 4.52 Whisper encoder layers built from our audio GGUF,
run module by module (WhisperEncoder.forward insists on 3000 mel frames), + the projector and
average pooling in torch; and the log-mel front end with torch.stft."""

from __future__ import annotations

import numpy as np
import torch

from llama_omni_py._native import core


class ReferenceApm:
    def __init__(self, audio_gguf: str, activation: str = "gelu"):
        """activation: transformers' name; "gelu_pytorch_tanh" is the approximation llama.cpp-omni uses."""
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        g = core.GgufFile(audio_gguf)
        d, layers, heads = g.value("d_model"), g.value("encoder_layers"), g.value("encoder_attention_heads")
        cfg = WhisperConfig(
            d_model=d,
            encoder_layers=layers,
            encoder_attention_heads=heads,
            encoder_ffn_dim=g.value("encoder_ffn_dim"),
            num_mel_bins=g.value("n_mel"),
            max_source_positions=g.find_tensor("encoder.positional_embedding").ne[1],
            activation_function=activation,
        )
        cfg._attn_implementation = "eager"
        self.enc = WhisperEncoder(cfg).eval()
        approximate = "tanh" if activation == "gelu_pytorch_tanh" else "none"
        self.gelu = lambda t: torch.nn.functional.gelu(t, approximate=approximate)  # noqa: E731
        f = lambda n: torch.from_numpy(np.array(g.read_f32(n)))  # noqa: E731
        state = {
            "conv1.weight": f("encoder.conv1.weight"),
            "conv1.bias": f("encoder.conv1.bias").reshape(-1),
            "conv2.weight": f("encoder.conv2.weight"),
            "conv2.bias": f("encoder.conv2.bias").reshape(-1),
            "embed_positions.weight": f("encoder.positional_embedding"),
            "layer_norm.weight": f("encoder.ln_post.weight"),
            "layer_norm.bias": f("encoder.ln_post.bias"),
        }
        names = {
            "self_attn.q_proj": "attn.query",
            "self_attn.k_proj": "attn.key",
            "self_attn.v_proj": "attn.value",
            "self_attn.out_proj": "attn.out",
            "self_attn_layer_norm": "attn_ln",
            "fc1": "mlp.0",
            "fc2": "mlp.2",
            "final_layer_norm": "mlp_ln",
        }
        for i in range(layers):
            for hf, ours in names.items():
                for kind in ("weight", "bias"):
                    name = f"encoder.blocks.{i}.{ours}.{kind}"
                    if g.find_tensor(name) is not None:
                        state[f"layers.{i}.{hf}.{kind}"] = f(name)
        missing, unexpected = self.enc.load_state_dict(state, strict=False)
        assert not unexpected and all(k.endswith("k_proj.bias") for k in missing), (missing, unexpected)
        self.p = [f(f"audio_projector.linear{j}.{k}") for j in (1, 2) for k in ("weight", "bias")]
        self.pool = g.value("audio_pool_step")
        self.filters = torch.tensor(np.asarray(g.value("filters"), np.float32).reshape(g.value("n_mel"), -1))

    @torch.inference_mode()
    def encode(self, mel: np.ndarray) -> np.ndarray:
        return self.encode_stream([mel])[0]

    @torch.inference_mode()
    def encode_stream(self, mels: list) -> list:
        """Chunks encoded one after another with history: the same as the concatenation with a
        block-causal mask (chunk i attends to chunks 0..i), each chunk convolved on its own."""
        e = self.enc
        conv = []
        for mel in mels:
            x = self.gelu(e.conv1(torch.from_numpy(mel)[None]))
            conv.append(self.gelu(e.conv2(x)).permute(0, 2, 1))
        sizes = [c.shape[1] for c in conv]
        x = torch.cat(conv, dim=1)
        x = x + e.embed_positions.weight[: x.shape[1]]
        chunk = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        mask = torch.where(chunk[None, :] <= chunk[:, None], 0.0, float("-inf"))[None, None]
        for layer in e.layers:
            x = layer(x, mask, layer_head_mask=None)[0]
        x = e.layer_norm(x)
        w1, b1, w2, b2 = self.p
        x = torch.relu(x @ w1.T + b1) @ w2.T + b2
        out = []
        for part in torch.split(x, sizes, dim=1):
            p = torch.nn.functional.avg_pool1d(part.transpose(1, 2), self.pool, self.pool).transpose(1, 2)
            out.append(p[0].numpy())
        return out

    @torch.inference_mode()
    def encode_cached(self, mels: list, chunk_count: bool, f16_conv_input: bool = False) -> list:
        """Chunks through an explicit per-layer K/V table of every position (zeros after a clear):
        the k-th chunk since the clear, of T positions, at k * T with ``chunk_count`` (llama.cpp-omni's
        rule), else after the positions before it; each attends over the table up to its end. The
        table is cleared when the chunk would not fit (k >= positions // T, or the end past them).
        ``f16_conv_input``: each convolution reads its input rounded to F16 (llama.cpp-omni's)."""
        f16 = (lambda t: t.half().float()) if f16_conv_input else (lambda t: t)  # noqa: E731
        e = self.enc
        table, d = e.embed_positions.weight.shape
        heads = e.config.encoder_attention_heads
        caches = [(torch.zeros(table, d), torch.zeros(table, d)) for _ in e.layers]
        k = pos = 0
        out = []
        for mel in mels:
            x = self.gelu(e.conv2(f16(self.gelu(e.conv1(f16(torch.from_numpy(mel)[None]))))))[0].T  # (T, d)
            t = x.shape[0]
            if (k >= table // t) if chunk_count else (pos + t > table):
                for kc, vc in caches:
                    kc.zero_()
                    vc.zero_()
                k = pos = 0
            off = k * t if chunk_count else pos
            end = off + t
            x = x + e.embed_positions.weight[off:end]
            for layer, (kc, vc) in zip(e.layers, caches):
                a, h = layer.self_attn, layer.self_attn_layer_norm(x)
                kc[off:end], vc[off:end] = a.k_proj(h), a.v_proj(h)
                split = lambda m: m.reshape(m.shape[0], heads, -1).transpose(0, 1)  # noqa: E731
                att = torch.softmax(split(a.q_proj(h) * a.scaling) @ split(kc[:end]).transpose(1, 2), -1)
                x = x + a.out_proj((att @ split(vc[:end])).transpose(0, 1).reshape(t, d))
                x = x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))
            x = e.layer_norm(x)
            w1, b1, w2, b2 = self.p
            x = torch.relu(x @ w1.T + b1) @ w2.T + b2
            out.append(torch.nn.functional.avg_pool1d(x.T[None], self.pool, self.pool)[0].T.numpy())
            k, pos = k + 1, end
        return out

    @torch.inference_mode()
    def encode_batch(self, mels: list, chunk: int = 0) -> list:
        """MiniCPM-o 4.5's ``get_audio_embedding``: the mels padded with zeros to the longest into
        one batch, a key-padding mask past each length (after the stride-2 convolution), with
        ``chunk`` > 0 the block-causal chunk mask (every left block kept), and each item's pooled
        rows cut to ((c - 5) // 5 + 1)."""
        e = self.enc
        lens = torch.tensor([m.shape[1] for m in mels])
        batch = torch.zeros(len(mels), mels[0].shape[0], int(lens.max()))
        for i, m in enumerate(mels):
            batch[i, :, : m.shape[1]] = torch.from_numpy(m)
        x = self.gelu(e.conv2(self.gelu(e.conv1(batch)))).permute(0, 2, 1)
        t = x.shape[1]
        x = x + e.embed_positions.weight[:t]
        after_conv = (lens - 1) // 2 + 1
        masked = torch.arange(t)[None, :] >= after_conv[:, None]  # keys past each length
        masked = masked[:, None, None, :].expand(len(mels), 1, t, t)
        if chunk > 0:
            q, k = torch.arange(t)[:, None], torch.arange(t)[None, :]
            masked = masked | (k // chunk > q // chunk)[None, None]
        mask = torch.zeros(masked.shape).masked_fill(masked, float("-inf"))
        for layer in e.layers:
            x = layer(x, mask, layer_head_mask=None)[0]
        x = e.layer_norm(x)
        w1, b1, w2, b2 = self.p
        x = torch.relu(x @ w1.T + b1) @ w2.T + b2
        pooled = torch.nn.functional.avg_pool1d(x.transpose(1, 2), self.pool, self.pool).transpose(1, 2)
        rows = (after_conv - self.pool) // self.pool + 1
        return [pooled[i, : int(rows[i])].numpy() for i in range(len(mels))]

    @torch.inference_mode()
    def log_mel(self, audio: np.ndarray) -> np.ndarray:
        """WhisperFeatureExtractor's recipe (without padding to 30 s), in float64."""
        stft = torch.stft(
            torch.from_numpy(audio.astype(np.float64)),
            400,
            160,
            window=torch.hann_window(400, dtype=torch.float64),
            return_complex=True,
        )
        power = stft[..., :-1].abs() ** 2
        mel = self.filters.double() @ power
        log = torch.clamp(mel, min=1e-10).log10()
        log = torch.maximum(log, log.max() - 8.0)
        return ((log + 4.0) / 4.0).float().numpy()
