"""Every knob, as frozen dataclasses validated at construction (each error is a
:class:`ConfigError` naming the field). Two roots: what an engine is loaded with, and how a session
replies. An engine and each of its sessions are given the two apart (``config=``, ``reply=``).

    EngineConfig                load time, shared by every session slot of an engine
      fidelity                  llama.cpp-omni's rules or the reference's where they differ (fidelity.py)
      token2wav: Token2WavConfig  CFM steps, vocoder threads/CPUs, noise, cache policy, Token2Mel
      vision: VisionConfig      image slicing rules and max_slice_nums
      video: VideoConfig        frames per video, frame rule, stacking, audio segments
      placement                 pin, numa_node
      limits                    n_ctx, tts_ctx, threads, max_beams, exact, batch_invariant
    ReplyConfig                 per session (engine.session(...)), each request may override
      system_prompt, ref_audio  the system turn and its reference audio
      llm: LlmSampling          the reply's text sampling, or beam search
      tts: TtsSampling          speech-code sampling (None: the fidelity's)
      limits                    max_new_tokens, max_audio_per_chunk, seed
      channels                  tts_queue, audio_queue
    DuplexConfig                a full-duplex conversation (duplex/)

Environment overrides are read by env.py (an explicit field wins).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import checks
from .constants import CODES_PER_SECOND, DEFAULT_QUEUE, DEFAULT_VOCODER_THREADS, MAX_AUDIO_PER_CHUNK
from .env import ENV_NUMA_NODE, ENV_T2W_THREADS, ENV_TTS_QUEUE, env_int, tts_queue_env
from .errors import ConfigError
from .fidelity import AUDIO_HISTORIES, AUDIO_POSITIONS, DEFAULTS, FIDELITIES, RESAMPLERS
from .video import VideoConfig
from .vision.config import VisionConfig
from .vision.slicing import MAX_SLICE_NUMS

CACHE_POLICIES = ("llama.cpp-omni", "reference")
TOKEN2MEL_IMPLEMENTATIONS = ("auto", "graph", "native")
AUDIO_MODES = ("clamp", "window")
HANDOFFS = ("window", "text_chunk")


MAX_BEAMS = 8


@dataclass(frozen=True)
class LlmSampling:
    """How the LLM samples the reply (MiniCPM-o's speech defaults), or, with ``num_beams`` > 1,
    searches it: transformers' beam search with do_sample=False (docs/speech-path.md#beam-search).
    A search is deterministic: temperature, top_k, top_p, min_p and the seed do not apply, and
    ``repeat_penalty`` scales the log-probabilities of every distinct token the beam has
    generated (transformers' rule; ``repeat_last_n`` does not apply)."""

    temperature: float = 0.7  # 0: greedy
    top_k: int = 20  # 0: off
    top_p: float = 0.95  # 1: off
    min_p: float = 0.0  # 0: off
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    num_beams: int = 1  # 1: sample; 2..8: beam search (the engine needs EngineConfig.max_beams >= it)
    length_penalty: float = 1.0  # a finished beam's score: sum of log-probs / length ** length_penalty
    early_stopping: bool | str = False  # False: transformers' heuristic; True; "never"

    def __post_init__(self):
        checks.number_in("temperature", self.temperature, 0.0, 10.0)
        checks.int_in("top_k", self.top_k, 0)
        checks.number_in("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        checks.number_in("min_p", self.min_p, 0.0, 1.0)
        checks.number_in("repeat_penalty", self.repeat_penalty, 0.0, 10.0, lo_open=True)
        checks.int_in("repeat_last_n", self.repeat_last_n, 0)
        checks.int_in("num_beams", self.num_beams, 1, MAX_BEAMS)
        checks.number_in("length_penalty", self.length_penalty, -10.0, 10.0)
        if not (isinstance(self.early_stopping, bool) or self.early_stopping == "never"):
            raise ConfigError("early_stopping", f"must be False, True or 'never', got {self.early_stopping!r}")

    @classmethod
    def reference_beam_search(cls, num_beams: int = 3) -> LlmSampling:
        """The PyTorch reference's ``chat(do_sample=False)``: transformers' beam search with 3
        beams and a repetition penalty of 1.2 (what MiniCPM-o's evaluation kit decodes with)."""
        return cls(num_beams=num_beams, repeat_penalty=1.2, length_penalty=1.0, early_stopping=False)

    @property
    def beam_search(self) -> bool:
        return self.num_beams > 1


@dataclass(frozen=True)
class TtsSampling:
    """How the TTS samples speech codes. The default is llama.cpp-omni's turn-based rule (repetition
    penalty over the last 8 codes, multinomial over every code); :meth:`llama_cpp_omni_duplex` its
    duplex one. ``count_penalty`` raises the penalty to the power of how often a code occurred in
    the window (the demo's duplex rule) instead of applying it once per distinct code."""

    temperature: float = 0.8  # 0: greedy
    repetition_penalty: float = 1.05
    window: int = 8  # codes the repetition penalty looks back over
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    count_penalty: bool = False
    top_p_first: bool = False  # nucleus over all codes, then top-k (the reference's order)

    def __post_init__(self):
        checks.number_in("temperature", self.temperature, 0.0, 10.0)
        checks.number_in("repetition_penalty", self.repetition_penalty, 0.0, 10.0, lo_open=True)
        checks.int_in("window", self.window, 0)
        checks.int_in("top_k", self.top_k, 0)
        checks.number_in("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        for name in ("count_penalty", "top_p_first"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be True or False, got {getattr(self, name)!r}")

    @classmethod
    def llama_cpp_omni_duplex(cls) -> TtsSampling:
        return cls(window=16, top_k=25, top_p=0.85)

    @classmethod
    def reference(cls) -> TtsSampling:
        """The PyTorch reference's streaming TTS rule: the penalty counts each code's occurrences
        in the last 16, then nucleus 0.85 over all codes and top-k 25 of those (at least 3 kept)."""
        return cls(window=16, top_k=25, top_p=0.85, count_penalty=True, top_p_first=True)


@dataclass(frozen=True)
class Token2WavConfig:
    """Token2Wav settings. ``threads`` None: OMNI_T2W_THREADS, else up to 16; always capped to
    the CPUs this process may use. ``cpus`` pins the vocoder workers, one CPU per thread."""

    steps: int = 5  # CFM steps; must match the prompt cache (llama.cpp-omni: 5)
    threads: int | None = None
    cpus: tuple[int, ...] | None = None
    temperature: float = 1.0  # scale of the initial CFM noise
    seed: int = 42  # noise generator seed (llama.cpp-omni: 42)
    # "llama.cpp-omni" or "reference" (docs/token2wav-streaming.md); None: the session's fidelity
    # (llama.cpp-omni's for a Token2Wav on its own)
    cache_policy: str | None = None
    # which Token2Mel computes on the CPU: "native" (our hand-written CPU code), "graph" (ggml
    # graphs), "auto" (native on the CPU, graphs on an accelerator). docs/token2wav.md.
    token2mel: str = "auto"
    bf16: bool = False  # BF16 matmuls in the vocoder and the native Token2Mel (needs AVX512_BF16)
    # Token2Mel and the vocoder as two pipeline stages (the vocoder of window N-1 beside
    # Token2Mel of window N). None: when Token2Mel runs off the CPU (on one CPU both would only
    # compete for the same cores).
    overlap: bool | None = None
    # Speech codes the first window waits for (5..25; 25 = a full window). Fewer: the first audio
    # comes sooner, and the first window sees less context (docs/token2wav-streaming.md).
    first_window_codes: int = 25

    def __post_init__(self):
        checks.int_in("steps", self.steps, 1, 100)
        checks.int_in("first_window_codes", self.first_window_codes, 5, CODES_PER_SECOND)
        checks.number_in("temperature", self.temperature, 0.0, 10.0)
        checks.int_in("seed", self.seed, 0, checks.SEED_MAX)
        if self.cache_policy is not None:
            checks.choice("cache_policy", self.cache_policy, CACHE_POLICIES)
        checks.choice("token2mel", self.token2mel, TOKEN2MEL_IMPLEMENTATIONS)
        if not isinstance(self.bf16, bool):
            raise ConfigError("bf16", f"must be True or False, got {self.bf16!r}")
        if self.overlap is not None and not isinstance(self.overlap, bool):
            raise ConfigError("overlap", f"must be None, True or False, got {self.overlap!r}")
        if self.threads is not None:
            checks.int_in("threads", self.threads, 1)
        if self.cpus is not None:
            cpus = tuple(self.cpus)
            if not cpus or not all(checks.is_int(c) and c >= 0 for c in cpus):
                raise ConfigError("cpus", f"must be a non-empty list of CPU ids, got {self.cpus!r}")
            if len(set(cpus)) != len(cpus):
                raise ConfigError("cpus", "lists a CPU twice")
            allowed = set(checks.usable_cpus())
            bad = [c for c in cpus if c not in allowed]
            if bad:
                raise ConfigError(
                    "cpus",
                    f"CPUs {bad} are outside this process's affinity mask "
                    f"({len(allowed)} usable); pinning cannot be honoured",
                )
            if self.threads is not None and self.threads != len(cpus):
                raise ConfigError("cpus", f"has {len(cpus)} CPUs for threads={self.threads}; give one CPU per thread")
            object.__setattr__(self, "cpus", cpus)
        _ = self.explicit_threads  # a malformed OMNI_T2W_THREADS fails here, not later

    @property
    def explicit_threads(self) -> int | None:
        """The thread count the user asked for (field, else OMNI_T2W_THREADS), or None."""
        if self.cpus is not None:
            return len(self.cpus)
        if self.threads is not None:
            return self.threads
        env = env_int(ENV_T2W_THREADS)
        if env is not None and env < 1:
            raise ConfigError(ENV_T2W_THREADS, f"must be a positive integer, got {env}")
        return env

    @property
    def resolved_threads(self) -> int:
        """The vocoder pool size this config gives on this process's CPUs."""
        if self.cpus is not None:
            return len(self.cpus)
        usable = len(checks.usable_cpus())
        wanted = self.explicit_threads
        return min(usable, wanted if wanted is not None else DEFAULT_VOCODER_THREADS)


@dataclass(frozen=True)
class EngineConfig:
    """What an engine is loaded with, shared by every session slot of it (an
    :class:`~llama_omni_py.OmniEngine`, or an ``OmniSession`` alone); every error names the field.
    How each session replies is its :class:`ReplyConfig`."""

    threads: int | None = None  # LLM/TTS/encoder CPU threads; None: libllama's default for the LLM, 1 for the
    # TTS, the stage threads' CPUs (at most 16) for the audio and image encoders
    n_ctx: int = 8192  # LLM context (tokens): holds a 64-frame, 64-second video with its audio
    prompt_cache: bool = True  # keep the KV of the prefix a prompt shares with the previous one
    tts_ctx: int = 4096  # TTS KV positions; longer replies slide (oldest chunks dropped)
    # whose rules where llama.cpp-omni and the reference differ; the fields below that are None
    # follow it (fidelity.py, docs/fidelity.md)
    fidelity: str = "llama.cpp-omni"
    token2wav: Token2WavConfig = field(default_factory=Token2WavConfig)
    pin: bool | None = None  # None: pin when the NUMA node has >= 4 usable CPUs; True: always
    numa_node: int | None = None  # None: OMNI_NUMA_NODE, else the device's node
    # a lone audio clip over 30 s: "clamp" (its first 29.9 s) or "window" (30 s chunks); None: the
    # fidelity's. A video's audio segments are never clamped.
    audio_mode: str | None = None
    audio_fidelity: str | None = None  # the audio encoder's rules: "llama.cpp-omni" or "reference"
    audio_resampler: str | None = None  # audio files not at 16 kHz: "linear" (llama.cpp-omni's) or "band-limited"
    # llama.cpp-omni's encoder history, which both fidelities leave out (docs/fidelity.md): "carried"
    # runs a request's clips (voice, history, question) through one history; "chunk-count" positions
    # a stream chunk at k * its length
    audio_history: str | None = None  # "clip" (each clip alone) or "carried"
    audio_positions: str | None = None  # "consecutive" or "chunk-count"
    video: VideoConfig = field(default_factory=VideoConfig)  # frames, audio segments (video.py)
    # image slicing: rules (None: the fidelity's) and max_slice_nums (None: the rules' default)
    vision: VisionConfig = field(default_factory=VisionConfig)
    exact: bool = False  # F32 weights and KV caches (tests); else the files' F16
    # engines of several slots (docs/slots.md): True evaluates each slot's LLM and TTS steps alone,
    # so a reply is bit for bit what a lone session gives, at the cost of the batching gain
    batch_invariant: bool = False
    prefill_chunk: int = 512  # prompt rows per step; other slots' decode steps run in between
    # the widest beam search a session may ask for (LlmSampling.num_beams): each slot holds this
    # many LLM KV sequences of n_ctx positions (docs/slots.md#beam-search)
    max_beams: int = 1

    def __post_init__(self):
        object.__setattr__(self, "threads", checks.threads("threads", self.threads))
        for name in ("batch_invariant", "prompt_cache", "exact"):
            checks.flag(name, getattr(self, name))
        checks.int_in("prefill_chunk", self.prefill_chunk, 1, 512)
        checks.int_in("n_ctx", self.n_ctx, 256, 1 << 20)
        checks.int_in("tts_ctx", self.tts_ctx, 64, 65536)
        checks.choice("fidelity", self.fidelity, FIDELITIES)
        for name, allowed in (
            ("audio_fidelity", FIDELITIES),
            ("audio_resampler", RESAMPLERS),
            ("audio_history", AUDIO_HISTORIES),
            ("audio_positions", AUDIO_POSITIONS),
        ):
            if getattr(self, name) is not None:
                checks.choice(name, getattr(self, name), allowed)
        for name, cls in (("token2wav", Token2WavConfig), ("vision", VisionConfig), ("video", VideoConfig)):
            checks.instance(name, getattr(self, name), cls)
        checks.int_in("max_beams", self.max_beams, 1, MAX_BEAMS)
        if self.pin is not None and not isinstance(self.pin, bool):
            raise ConfigError("pin", f"must be True, False or None, got {self.pin!r}")
        if self.numa_node is None:
            object.__setattr__(self, "numa_node", env_int(ENV_NUMA_NODE))
        if self.numa_node is not None:
            checks.int_in("numa_node", self.numa_node, 0, 4095)
        if self.audio_mode is not None:
            checks.choice("audio_mode", self.audio_mode, AUDIO_MODES)

    @property
    def token2wav_config(self) -> Token2WavConfig:
        """``token2wav`` with its cache policy resolved (the field, else the fidelity's)."""
        if self.token2wav.cache_policy is not None:
            return self.token2wav
        return replace(self.token2wav, cache_policy=DEFAULTS[self.fidelity].cache_policy)

    @property
    def audio_rule(self) -> str:
        """The audio encoder's rules in force: the field, else the fidelity's."""
        return self.audio_fidelity or DEFAULTS[self.fidelity].audio

    @property
    def audio_mode_rule(self) -> str:
        """How a lone clip over 30 s is encoded: the field, else the fidelity's."""
        return self.audio_mode or DEFAULTS[self.fidelity].audio_mode

    @property
    def audio_rules(self) -> dict:
        """The audio input rules in force, as InputEncoder's keyword arguments: each field, else the
        fidelity's."""
        d = DEFAULTS[self.fidelity]
        return {
            "audio_fidelity": self.audio_rule,
            "resampler": self.audio_resampler or d.resampler,
            "audio_history": self.audio_history or d.audio_history,
            "audio_positions": self.audio_positions or d.audio_positions,
        }

    @property
    def vision_config(self) -> VisionConfig:
        """The image rules in force: ``vision`` with its rules resolved by the fidelity."""
        return self.vision.resolved(self.fidelity)

    @property
    def llm_threads(self) -> int:
        """LLM threads for libllama (0: its default)."""
        return self.threads or 0

    @property
    def module_threads(self) -> int:
        """TTS threads (the TTS runs beside the LLM; the encoders' default is the session's)."""
        return self.threads or 1


@dataclass(frozen=True)
class ReplyConfig:
    """How a session replies unless a request says otherwise: its system prompt, reference audio,
    sampling and limits. Each session of an engine may have its own (``engine.session(...)``);
    every error names the field."""

    system_prompt: str | None | bool = None  # the assistant role text; None: the default; False: no system turn
    ref_audio: object = (
        None  # reference audio for the system prompt's voice slot: a path, bytes, samples or EncodedAudio
    )
    llm: LlmSampling = field(default_factory=LlmSampling)
    tts: TtsSampling | None = None  # None: the engine fidelity's
    max_new_tokens: int = 256  # LLM tokens per reply
    max_audio_per_chunk: int = MAX_AUDIO_PER_CHUNK  # TTS codes per 10-token chunk before it is cut
    tts_handoff: str = "window"  # 25 codes at a time to Token2Wav; "text_chunk": a text chunk's codes at once
    seed: int = 0  # default per-request seed; -1: random
    tts_queue: int | None = None  # LLM -> TTS channel; None: OMNI_TTS_QUEUE, else 16
    audio_queue: int = DEFAULT_QUEUE  # TTS -> Token2Wav -> caller channels
    prompt_fidelity: str | None = None  # whose prompt layout: "llama.cpp-omni" or "reference"; None: the engine's

    def __post_init__(self):
        sp = self.system_prompt
        if not (sp is None or sp is False or isinstance(sp, str)):
            raise ConfigError("system_prompt", f"must be a string, None or False, got {type(sp).__name__}")
        checks.instance("llm", self.llm, LlmSampling)
        if self.tts is not None:
            checks.instance("tts", self.tts, TtsSampling)
        checks.int_in("max_new_tokens", self.max_new_tokens, 1, 1 << 20)
        checks.int_in("max_audio_per_chunk", self.max_audio_per_chunk, 1, 100_000)
        checks.choice("tts_handoff", self.tts_handoff, HANDOFFS)
        if not (checks.is_int(self.seed) and (self.seed == checks.RANDOM_SEED or 0 <= self.seed <= checks.SEED_MAX)):
            raise ConfigError("seed", f"must be -1 (random) or an integer in 0..{checks.SEED_MAX}, got {self.seed!r}")
        if self.tts_queue is None:
            object.__setattr__(self, "tts_queue", tts_queue_env() or DEFAULT_QUEUE)
            checks.int_in(ENV_TTS_QUEUE, self.tts_queue, 1, 10_000)
        checks.int_in("tts_queue", self.tts_queue, 1, 10_000)
        checks.int_in("audio_queue", self.audio_queue, 1, 10_000)
        if self.prompt_fidelity is not None:
            checks.choice("prompt_fidelity", self.prompt_fidelity, FIDELITIES)

    def check_fits(self, engine: EngineConfig) -> None:
        """ConfigError when these replies cannot run on ``engine`` (its context, its TTS context,
        its beams)."""
        checks.int_in("max_new_tokens", self.max_new_tokens, 1, engine.n_ctx)
        if self.max_audio_per_chunk + 16 > engine.tts_ctx:
            raise ConfigError(
                "tts_ctx",
                f"must hold one chunk: at least max_audio_per_chunk + 16 "
                f"({self.max_audio_per_chunk + 16}), got {engine.tts_ctx}",
            )
        if self.llm.num_beams > engine.max_beams:
            raise ConfigError(
                "max_beams", f"must be at least llm.num_beams ({self.llm.num_beams}), got {engine.max_beams}"
            )

    def tts_sampling(self, fidelity: str) -> TtsSampling:
        """The TTS rule in force on an engine of ``fidelity``: the field, else the fidelity's."""
        if self.tts is not None:
            return self.tts
        return TtsSampling.reference() if DEFAULTS[fidelity].reference_tts else TtsSampling()

    def prompt_rule(self, fidelity: str) -> str:
        """The prompt layout in force on an engine of ``fidelity``: the field, else the fidelity's."""
        return self.prompt_fidelity or fidelity


@dataclass(frozen=True)
class DuplexConfig:
    """Full-duplex decoding, as MiniCPM-o's demo runs it (docs/duplex.md). Text sampling happens
    in two stages: an untempered draw over the whole vocabulary ends the unit when it picks
    ``<|chunk_eos|>``; otherwise the penalised, filtered draw below decides."""

    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    repetition_penalty: float = 1.05  # divides the logits of recent non-special tokens
    repetition_window: int = 512  # tokens of the session the penalty looks back over
    length_penalty: float = 1.1  # on <|turn_eos|>: the reply is more likely to go on
    listen_prob_scale: float = 1.0  # multiplies the <|listen|> logit before temperature
    greedy: bool = False  # argmax instead of sampling (tests)
    force_listen_count: int = 3  # the session's first units always listen
    max_tokens_per_unit: int = 20  # the last slot is a forced <|chunk_eos|>
    max_chars_per_unit: int = 28  # a token that would reach this many characters ends the unit
    tts: TtsSampling = field(default_factory=lambda: TtsSampling(window=16, count_penalty=True))
    codes_per_unit: int = 25  # speech codes a unit adds in the middle of a turn (one second)
    cache_policy: str = "reference"  # Token2Wav: the demo flushes a window of any length every unit
    seed: int = 0
    max_context: int | None = None  # LLM positions before whole units are pruned; None: n_ctx - 512
    prune_to: int | None = None  # positions kept after pruning; None: 3/4 of max_context
    audio_queue: int = DEFAULT_QUEUE
    # slices per frame besides its overview (0..9); None: none, as the reference's duplex (1)
    # and llama.cpp-omni (0) do by default. A unit's frames may ask otherwise (send()).
    max_slice_nums: int | None = None
    # Tokens the text sampler never picks, besides <|tts_pad|> and <|chunk_eos|>: the reference
    # forbids its tokenizer's bad_token_ids (duplex.bad_token_ids(tokenizer_config.json)).
    forbidden_token_ids: tuple[int, ...] = field(default=(), repr=False)

    def __post_init__(self):
        checks.number_in("temperature", self.temperature, 0.0, 10.0)
        checks.int_in("top_k", self.top_k, 0)
        checks.number_in("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        checks.number_in("repetition_penalty", self.repetition_penalty, 0.0, 10.0, lo_open=True)
        checks.int_in("repetition_window", self.repetition_window, 0)
        checks.number_in("length_penalty", self.length_penalty, 0.0, 10.0, lo_open=True)
        checks.number_in("listen_prob_scale", self.listen_prob_scale, 0.0, 100.0)
        if not isinstance(self.greedy, bool):
            raise ConfigError("greedy", f"must be True or False, got {self.greedy!r}")
        checks.int_in("force_listen_count", self.force_listen_count, 0, 1000)
        checks.int_in("max_tokens_per_unit", self.max_tokens_per_unit, 2, 1000)
        checks.int_in("max_chars_per_unit", self.max_chars_per_unit, 1, 10_000)
        if not isinstance(self.tts, TtsSampling):
            raise ConfigError("tts", f"must be a TtsSampling, got {type(self.tts).__name__}")
        checks.int_in("codes_per_unit", self.codes_per_unit, 1, 500)
        checks.choice("cache_policy", self.cache_policy, CACHE_POLICIES)
        object.__setattr__(self, "seed", checks.seed(self.seed, config=True))
        if self.max_context is not None:
            checks.int_in("max_context", self.max_context, 512, 1 << 20)
        if self.prune_to is not None:
            checks.int_in("prune_to", self.prune_to, 256, (self.max_context or 1 << 20) - 128)
        checks.int_in("audio_queue", self.audio_queue, 1, 10_000)
        if self.max_slice_nums is not None:
            checks.int_in("max_slice_nums", self.max_slice_nums, 0, MAX_SLICE_NUMS)
        ids = self.forbidden_token_ids
        if not isinstance(ids, (list, tuple)) or not all(checks.is_int(i) and i >= 0 for i in ids):
            raise ConfigError("forbidden_token_ids", "must be a list of non-negative token ids")
        object.__setattr__(self, "forbidden_token_ids", tuple(sorted(set(ids))))

    def context_limits(self, n_ctx: int) -> tuple[int, int]:
        """(prune when past, prune down to) for an LLM context of ``n_ctx`` positions."""
        high = self.max_context if self.max_context is not None else n_ctx - 512
        if high + 256 > n_ctx:
            raise ConfigError(
                "max_context",
                f"{high} leaves no room for a unit in the LLM context ({n_ctx}); lower it or raise EngineConfig.n_ctx",
            )
        low = self.prune_to if self.prune_to is not None else high * 3 // 4
        if low >= high:
            raise ConfigError("prune_to", f"must be below max_context ({high}), got {low}")
        return high, low
