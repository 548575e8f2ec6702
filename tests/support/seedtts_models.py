"""Tiny random-weight model folders for the Seed-TTS metric tests: Whisper (transformers),
paraformer (funasr), WavLM in s3prl's checkpoint format and transformers' format, the
speaker-verification checkpoint, and the proxy's wavlm-base-plus-like folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

SR = 16000


def tone(path: Path, f0: float, seconds: float = 1.0, sr: int = SR, harmonics: int = 4, seed: int = 0) -> Path:
    """A harmonic tone with a little noise, written as 16-bit PCM."""
    t = np.arange(int(seconds * sr)) / sr
    rng = np.random.default_rng(seed)
    x = sum(np.sin(2 * np.pi * f0 * (h + 1) * t) / (h + 1) for h in range(harmonics))
    x = 0.3 * x / np.abs(x).max() + 0.01 * rng.standard_normal(len(t))
    sf.write(path, x, sr, subtype="PCM_16")
    return path


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Every parameter and BatchNorm statistic random (scaled by fan-in), so a tensor loaded
    under the wrong name changes the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            scale = p[0].numel() ** -0.5 if p.dim() > 1 else 0.2
            offset = 1.0 if p.dim() == 1 and name.endswith("weight") else 0.0
            p.copy_(torch.randn(p.shape, generator=g) * scale + offset)
        for name, b in module.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)


# ---- Whisper ---------------------------------------------------------------------------------

WHISPER_SPECIALS = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",  # the tokenizer finds a language token at <|startoftranscript|> + 1 + its index
    "<|zh|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nocaptions|>",
    "<|notimestamps|>",
]


def whisper_folder(d: Path, letter: str = "a", max_length: int = 12) -> Path:
    """A 1-layer Whisper whose decoder always picks ``letter`` (its final norm emits that token's
    embedding), with a byte-level tokenizer; ``max_length - 4`` letters after the 4 prompt ids."""
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    d.mkdir(parents=True, exist_ok=True)
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    (d / "vocab.json").write_text(json.dumps(vocab))
    (d / "merges.txt").write_text("#version: 0.2\n")
    eot = WHISPER_SPECIALS[0]
    tok = WhisperTokenizer(
        str(d / "vocab.json"), str(d / "merges.txt"), unk_token=eot, bos_token=eot, eos_token=eot, pad_token=eot
    )
    tok.add_special_tokens({"additional_special_tokens": WHISPER_SPECIALS[1:]})
    WhisperProcessor(WhisperFeatureExtractor(feature_size=80), tok).save_pretrained(d)
    eot_id, sot_id = tok.convert_tokens_to_ids(WHISPER_SPECIALS[:2])
    ids = dict(decoder_start_token_id=sot_id, bos_token_id=eot_id, eos_token_id=eot_id, pad_token_id=eot_id)
    cfg = WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_source_positions=1500, max_target_positions=32, begin_suppress_tokens=None, suppress_tokens=None, **ids,
    )  # fmt: skip
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg)
    with torch.no_grad():
        u = torch.nn.functional.normalize(torch.randn(16), dim=0) * 10
        model.model.decoder.embed_tokens.weight[vocab[letter]] = u  # tied with the output projection
        model.model.decoder.layer_norm.weight.zero_()
        model.model.decoder.layer_norm.bias.copy_(u)
    model.generation_config = GenerationConfig(max_length=max_length, **ids)
    model.save_pretrained(d)
    return d


# ---- paraformer (funasr) ---------------------------------------------------------------------

PARAFORMER_TOKENS = ["<blank>", "<s>", "</s>", "你", "好", "這", "世", "界", "<unk>"]
PARAFORMER_CONFIG = """\
model: Paraformer
model_conf: {ctc_weight: 0.0, predictor_weight: 1.0, predictor_bias: 1, sampling_ratio: 0.75}
encoder: SANMEncoder
encoder_conf: {output_size: 16, attention_heads: 2, linear_units: 32, num_blocks: 1, input_layer: pe,
  pos_enc_class: SinusoidalPositionEncoder, normalize_before: true, kernel_size: 3, sanm_shfit: 0,
  selfattention_layer_type: sanm}
decoder: ParaformerSANMDecoder
decoder_conf: {attention_heads: 2, linear_units: 32, num_blocks: 1, att_layer_num: 1, kernel_size: 3, sanm_shfit: 0}
predictor: CifPredictorV2
predictor_conf: {idim: 16, threshold: 1.0, l_order: 1, r_order: 1, tail_threshold: 0.45}
frontend: WavFrontend
frontend_conf: {fs: 16000, window: hamming, n_mels: 20, frame_length: 25, frame_shift: 10, lfr_m: 1, lfr_n: 1}
tokenizer: CharTokenizer
tokenizer_conf: {unk_symbol: <unk>, split_with_space: true}
"""


def paraformer_folder(d: Path, char: str = "這") -> Path:
    """A 1-block Paraformer (config.yaml, tokens.json, model.pt) whose predictor fires a token
    every frame and whose decoder always picks ``char``."""
    import yaml
    from funasr.auto.auto_model import AutoModel

    d.mkdir(parents=True, exist_ok=True)
    (d / "tokens.json").write_text(json.dumps(PARAFORMER_TOKENS, ensure_ascii=False), encoding="utf-8")
    (d / "config.yaml").write_text(PARAFORMER_CONFIG, encoding="utf-8")
    conf = yaml.safe_load(PARAFORMER_CONFIG)
    conf["tokenizer_conf"]["token_list"] = str(d / "tokens.json")
    model, _ = AutoModel.build_model(**conf, device="cpu")
    state = model.state_dict()
    with torch.no_grad():
        state["decoder.output_layer.weight"].zero_()
        state["decoder.output_layer.bias"].zero_()
        state["decoder.output_layer.bias"][PARAFORMER_TOKENS.index(char)] = 10.0
        state["predictor.cif_output.weight"].zero_()
        state["predictor.cif_output.bias"].fill_(10.0)  # weight ~1 per frame: one token per frame
    torch.save(state, d / "model.pt")
    return d


# ---- WavLM and the speaker-verification checkpoint -------------------------------------------

LAYERS, HIDDEN = 2, 32


def s3prl_cfg(normalize: bool, layers: int = LAYERS) -> dict:
    """An s3prl WavLM cfg with WavLM-Large's layout (layer norm first, layer-norm conv blocks,
    gated relative position bias) and tiny widths."""
    return dict(
        extractor_mode="layer_norm", encoder_layers=layers, encoder_embed_dim=HIDDEN, encoder_ffn_embed_dim=64,
        encoder_attention_heads=4, layer_norm_first=True, conv_bias=False, normalize=normalize,
        conv_feature_layers="[(24,10,5)] + [(24,3,2)] * 4 + [(24,2,2)] * 2", conv_pos=16, conv_pos_groups=4,
        relative_position_embedding=True, num_buckets=320, max_distance=800, gru_rel_pos=True,
    )  # fmt: skip


def s3prl_wavlm(cfg: dict, seed: int):
    """s3prl's own WavLM (the reference) with random weights."""
    from s3prl.upstream.wavlm.WavLM import WavLM, WavLMConfig

    model = WavLM(WavLMConfig(cfg))
    randomize(model, seed)
    return model.eval()


def save_s3prl(path: Path, cfg: dict, model) -> Path:
    torch.save({"cfg": cfg, "model": model.state_dict()}, path)
    return path


def save_finetune(path: Path, wavlm_state: dict, head_state: dict, drop: tuple[str, ...] = ()) -> Path:
    """A checkpoint laid out as ``wavlm_large_finetune.pth``: ``{"model": ...}`` with the WavLM
    under ``feature_extract.model.``, the head at the top level and the training classifier."""
    state = {f"feature_extract.model.{k}": v for k, v in wavlm_state.items()}
    state.update(head_state)
    state["loss_calculator.projection.weight"] = torch.randn(7, 256)
    for k in drop:
        del state[k]
    torch.save({"model": state, "best_valid_eer": np.float64(0.5)}, path)  # a numpy scalar, as training saves it
    return path


def head_state(seed: int, feat_dim: int = HIDDEN, num_features: int = LAYERS + 1) -> dict:
    from llama_omni_py.eval.seedtts.ecapa import EcapaHead

    head = EcapaHead(feat_dim, num_features)
    randomize(head, seed)
    return head.state_dict()


def transformers_wavlm_folder(d: Path, config, do_normalize: bool, seed: int = 0) -> Path:
    """A transformers WavLM folder (config.json, weights, preprocessor_config.json)."""
    from transformers import Wav2Vec2FeatureExtractor, WavLMModel

    model = WavLMModel(config)
    randomize(model, seed)
    model.save_pretrained(d)
    Wav2Vec2FeatureExtractor(do_normalize=do_normalize, return_attention_mask=True).save_pretrained(d)
    return d


def proxy_folder(d: Path) -> Path:
    """A wavlm-base-plus-like folder (post-layer-norm layers, group-norm conv stem)."""
    from transformers import WavLMConfig

    cfg = WavLMConfig(
        hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=[24] * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        feat_extract_norm="group", do_stable_layer_norm=False,
    )  # fmt: skip
    return transformers_wavlm_folder(d, cfg, do_normalize=False, seed=5)
