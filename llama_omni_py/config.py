"""Every knob of a session, as one tree of frozen dataclasses validated at construction (each
error is a :class:`ConfigError` naming the field), and the one reader of environment overrides.

    SessionConfig
      fidelity                  llama.cpp-omni's rules or the reference's where they differ (fidelity.py)
      llm: LlmSampling          the reply's text sampling, or beam search
      tts: TtsSampling          speech-code sampling (None: the fidelity's)
      token2wav: Token2WavConfig  CFM steps, vocoder threads/CPUs, noise, cache policy
      vision: VisionConfig      image slicing rules and max_slice_nums
      video: VideoConfig        frames per video, frame rule, stacking, audio segments
      placement and queues      pin, numa_node, tts_queue, audio_queue
      limits                    n_ctx, max_new_tokens, max_audio_per_chunk, threads, seed, max_beams

Environment overrides (read here and nowhere else; an explicit field wins):
OMNI_TTS_QUEUE (tts_queue), OMNI_T2W_THREADS (token2wav.threads), OMNI_NUMA_NODE (numa_node),
OMNI_T2W_PROFILE (print a stage profile when a session closes), OMNI_CPU_ISA (the CPU kernel set of
the native engines: generic, avx2, avx512 or neon; default: the best this CPU runs), OMNI_FFMPEG
and OMNI_FFPROBE (the ffmpeg and ffprobe programs), XDG_CACHE_HOME (where generated sets go), OMNI_BENCH_TASKSET (set by
scripts/bench-pinned.sh for the benchmark manifest), OMNI_HUB (the hub a repository id comes
from) and the hub clients' HF_ENDPOINT, HF_HUB_OFFLINE, HF_HUB_CACHE, HF_HOME,
MODELSCOPE_ENDPOINT and MODELSCOPE_CACHE (read when a model is fetched, docs/model-files.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from . import checks
from .constants import CODES_PER_SECOND, DEFAULT_QUEUE, DEFAULT_VOCODER_THREADS, MAX_AUDIO_PER_CHUNK
from .errors import ConfigError
from .fidelity import AUDIO_HISTORIES, AUDIO_POSITIONS, DEFAULTS, FIDELITIES, RESAMPLERS
from .video import VideoConfig
from .vision.config import VisionConfig
from .vision.slicing import MAX_SLICE_NUMS

ENV_TTS_QUEUE = "OMNI_TTS_QUEUE"
ENV_T2W_THREADS = "OMNI_T2W_THREADS"
ENV_NUMA_NODE = "OMNI_NUMA_NODE"
ENV_PROFILE = "OMNI_T2W_PROFILE"
ENV_CPU_ISA = "OMNI_CPU_ISA"
ENV_BENCH_TASKSET = "OMNI_BENCH_TASKSET"  # set by scripts/bench-pinned.sh: the taskset a bench runs under

CACHE_POLICIES = ("llama.cpp-omni", "reference")
ENGINES = ("auto", "graph", "native")
AUDIO_MODES = ("clamp", "window")
HANDOFFS = ("window", "text_chunk")


def env_int(name: str, environ=None) -> int | None:
    """An integer environment override, or None when unset; a malformed value is a ConfigError."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(name, f"must be an integer, got {raw!r}") from None


def numa_node_choice(numa_node: int | None, environ=None) -> tuple[int | None, str]:
    """The NUMA node asked for -- the field, else OMNI_NUMA_NODE -- and the name of whichever gave
    it (for the error that names a node without usable CPUs)."""
    if numa_node is not None:
        return numa_node, "numa_node"
    return env_int(ENV_NUMA_NODE, environ), ENV_NUMA_NODE


def t2w_threads_env(environ=None) -> int | None:
    """OMNI_T2W_THREADS, or None."""
    return env_int(ENV_T2W_THREADS, environ)


def tts_queue_env(environ=None) -> int | None:
    """OMNI_TTS_QUEUE, or None."""
    return env_int(ENV_TTS_QUEUE, environ)


ENV_WORKER_SECRET = "OMNI_WORKER_SECRET"
ENV_API_KEY = "OMNI_API_KEY"


def worker_secret(environ=None) -> str | None:
    """OMNI_WORKER_SECRET: the secret a worker requires from its gateway (and a gateway sends to
    workers it did not start), or None."""
    return (os.environ if environ is None else environ).get(ENV_WORKER_SECRET) or None


def api_keys_from(keys=(), key_file: str | None = None, environ=None) -> tuple[str, ...]:
    """The gateway's API keys: those given, one per line of ``key_file``, and OMNI_API_KEY."""
    out = [k for k in keys if k]
    if key_file:
        try:
            text = Path(key_file).read_text()
        except OSError as e:
            raise ConfigError("api_key_file", f"cannot read {key_file}: {e}") from None
        out += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    env = (os.environ if environ is None else environ).get(ENV_API_KEY)
    if env:
        out.append(env.strip())
    return tuple(dict.fromkeys(out))


def cache_dir(environ=None) -> Path:
    """Where generated sets and cases live: $XDG_CACHE_HOME/llama-omni-py (~/.cache by default)."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama-omni-py"


def ffmpeg_name(environ=None) -> str:
    """The ffmpeg program to run: OMNI_FFMPEG, else "ffmpeg" on the PATH."""
    return (os.environ if environ is None else environ).get("OMNI_FFMPEG") or "ffmpeg"


def ffprobe_name(environ=None) -> str:
    """The ffprobe program to run: OMNI_FFPROBE, else the ffprobe beside OMNI_FFMPEG when that
    names a path, else "ffprobe" on the PATH."""
    env = os.environ if environ is None else environ
    if env.get("OMNI_FFPROBE"):
        return env["OMNI_FFPROBE"]
    ffmpeg = env.get("OMNI_FFMPEG") or ""
    return str(Path(ffmpeg).with_name("ffprobe")) if os.sep in ffmpeg else "ffprobe"


def bench_taskset(environ=None) -> str | None:
    """The CPU list scripts/bench-pinned.sh ran the bench under (OMNI_BENCH_TASKSET), or None."""
    return (os.environ if environ is None else environ).get(ENV_BENCH_TASKSET) or None


def cpu_isa_override(environ=None) -> str | None:
    """The CPU kernel set forced by OMNI_CPU_ISA, or None (the best this CPU runs)."""
    raw = (os.environ if environ is None else environ).get(ENV_CPU_ISA, "").strip().lower()
    return None if raw in ("", "auto") else raw


def profiling_enabled(environ=None) -> bool:
    return (os.environ if environ is None else environ).get(ENV_PROFILE, "0") not in ("", "0")


ENV_HUB = "OMNI_HUB"
HUBS = ("huggingface", "modelscope")
_TRUE = ("1", "on", "yes", "true")  # huggingface_hub's spelling of a set boolean variable


def hub_choice(hub: str | None = None, environ=None) -> str:
    """The hub a repository id is fetched from: ``hub``, else OMNI_HUB, else the Hugging Face Hub."""
    name, source = (hub, "hub") if hub else ((os.environ if environ is None else environ).get(ENV_HUB), ENV_HUB)
    name = (name or "").strip().lower() or "huggingface"
    if name not in HUBS:
        raise ConfigError(source, f"must be one of {', '.join(HUBS)}, got {name!r}")
    return name


@dataclass(frozen=True)
class HubEnvironment:
    """What a hub client takes from the environment, read when a model is fetched (not when a
    library is imported, so a variable set later still counts): the endpoint (a mirror), whether
    the network is off, and the cache directory (None: each library's default)."""

    endpoint: str | None
    offline: bool
    cache: str | None


def hub_environment(hub: str, environ=None) -> HubEnvironment:
    """HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_CACHE (else HF_HOME/hub) for the Hugging Face Hub;
    MODELSCOPE_ENDPOINT and MODELSCOPE_CACHE for ModelScope (its client has no offline switch:
    HF_HUB_OFFLINE stands for both)."""
    env = os.environ if environ is None else environ
    offline = env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE
    if hub == "modelscope":
        return HubEnvironment(env.get("MODELSCOPE_ENDPOINT") or None, offline, env.get("MODELSCOPE_CACHE") or None)
    home = env.get("HF_HOME")
    cache = env.get("HF_HUB_CACHE") or (str(Path(home) / "hub") if home else None)
    return HubEnvironment(env.get("HF_ENDPOINT") or None, offline, cache)


def _native_options(name: str, config, **resolved):
    """A core options struct filled field by field: every field the struct and ``config`` share,
    then ``resolved`` (values the config does not hold as such)."""
    from ._native import core

    native = getattr(core, name)()
    for f in fields(config):
        if hasattr(native, f.name) and f.name not in resolved:
            setattr(native, f.name, getattr(config, f.name))
    for k, v in resolved.items():
        setattr(native, k, v)
    return native


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
    num_beams: int = 1  # 1: sample; 2..8: beam search (the engine needs SessionConfig.max_beams >= it)
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

    def to_native(self, seed: int):
        """The core's SamplingOptions: these fields and the request's seed."""
        return _native_options("SamplingOptions", self, seed=seed)


@dataclass(frozen=True)
class TtsSampling:
    """How the TTS samples speech codes. The default is llama.cpp-omni's simplex rule (repetition
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

    def to_native(self, seed: int):
        """The core's TtsSamplerOptions: these fields and the request's seed."""
        return _native_options("TtsSamplerOptions", self, seed=seed)


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
    # Token2Mel's CPU compute: "native" (our CPU engine), "graph" (ggml graphs), "auto" (native
    # on the CPU, graphs on an accelerator). docs/performance.md.
    engine: str = "auto"
    bf16: bool = False  # BF16 matmuls in the vocoder and the native engine (needs AVX512_BF16)
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
        checks.choice("engine", self.engine, ENGINES)
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

    def to_native(self, device: str):
        """The core's Token2WavOptions for a stream on ``device``: the resolved thread count and
        CPUs; ``overlap`` is the pipeline's business and stays here."""
        return _native_options(
            "Token2WavOptions",
            self,
            device=device,
            threads=self.resolved_threads,
            cpus=list(self.cpus or []),
            cache_policy=self.cache_policy or DEFAULTS["llama.cpp-omni"].cache_policy,
        )


@dataclass(frozen=True)
class SessionConfig:
    """Knobs of an :class:`~llama_omni_py.OmniSession`; every error names the field."""

    threads: int | None = None  # LLM/TTS/encoder CPU threads; None: libllama's default for the LLM, 1 for the
    # TTS, the stage threads' CPUs (at most 16) for the audio and image encoders
    n_ctx: int = 8192  # LLM context (tokens): holds a 64-frame, 64-second video with its audio
    prompt_cache: bool = True  # keep the KV of the prefix a prompt shares with the previous one
    max_new_tokens: int = 256  # LLM tokens per reply
    max_audio_per_chunk: int = MAX_AUDIO_PER_CHUNK  # TTS codes per 10-token chunk before it is cut
    tts_ctx: int = 4096  # TTS KV positions; longer replies slide (oldest chunks dropped)
    tts_handoff: str = "window"  # 25 codes at a time to Token2Wav; "text_chunk": a text chunk's codes at once
    seed: int = 0  # default per-request seed; -1: random
    # whose rules where llama.cpp-omni and the reference differ; the fields below that are None
    # follow it (fidelity.py, docs/fidelity.md)
    fidelity: str = "llama.cpp-omni"
    llm: LlmSampling = field(default_factory=LlmSampling)
    tts: TtsSampling | None = None
    token2wav: Token2WavConfig = field(default_factory=Token2WavConfig)
    tts_queue: int | None = None  # LLM -> TTS queue; None: OMNI_TTS_QUEUE, else 16
    audio_queue: int = DEFAULT_QUEUE  # TTS -> Token2Wav -> caller queues
    pin: bool | None = None  # None: pin when the NUMA node has >= 4 usable CPUs; True: always
    numa_node: int | None = None  # None: OMNI_NUMA_NODE, else the device's node
    audio_mode: str = "clamp"  # or "window" for input audio over 29.9 s
    audio_fidelity: str | None = None  # the audio encoder's rules: "llama.cpp-omni" or "reference"
    audio_resampler: str | None = None  # audio files not at 16 kHz: "linear" (llama.cpp-omni's) or "band-limited"
    # llama.cpp-omni's encoder history, which both fidelities leave out (docs/fidelity.md): "carried"
    # runs a request's clips (voice, history, question) through one history; "chunk-count" positions
    # a stream chunk at k * its length
    audio_history: str | None = None  # "clip" (each clip alone) or "carried"
    audio_positions: str | None = None  # "consecutive" or "chunk-count"
    prompt_fidelity: str | None = None  # whose prompt layout: "llama.cpp-omni" or "reference"
    video: VideoConfig = field(default_factory=VideoConfig)  # frames, audio segments (video.py)
    # image slicing: rules (None: the fidelity's) and max_slice_nums (None: the rules' default)
    vision: VisionConfig = field(default_factory=VisionConfig)
    exact: bool = False  # F32 weights and KV caches (tests); else the files' F16
    # engines of several slots (docs/slots.md): True evaluates each slot's LLM and TTS steps alone,
    # so a reply is bit for bit what a lone session gives, at the cost of the batching gain
    batch_invariant: bool = False
    prefill_chunk: int = 512  # prompt rows per step; other slots' decode steps run in between
    # the widest beam search a request may ask for (LlmSampling.num_beams): each slot holds this
    # many LLM KV sequences of n_ctx positions (docs/slots.md#beam-search); None: llm.num_beams
    max_beams: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "threads", checks.threads("threads", self.threads))
        if not isinstance(self.batch_invariant, bool):
            raise ConfigError("batch_invariant", f"must be True or False, got {self.batch_invariant!r}")
        checks.int_in("prefill_chunk", self.prefill_chunk, 1, 512)
        checks.int_in("n_ctx", self.n_ctx, 256, 1 << 20)
        checks.int_in("max_new_tokens", self.max_new_tokens, 1, self.n_ctx)
        checks.int_in("max_audio_per_chunk", self.max_audio_per_chunk, 1, 100_000)
        checks.int_in("tts_ctx", self.tts_ctx, 64, 65536)
        if self.max_audio_per_chunk + 16 > self.tts_ctx:
            raise ConfigError(
                "tts_ctx",
                f"must hold one chunk: at least max_audio_per_chunk + 16 "
                f"({self.max_audio_per_chunk + 16}), got {self.tts_ctx}",
            )
        checks.choice("tts_handoff", self.tts_handoff, HANDOFFS)
        if not (checks.is_int(self.seed) and (self.seed == checks.RANDOM_SEED or 0 <= self.seed <= checks.SEED_MAX)):
            raise ConfigError("seed", f"must be -1 (random) or an integer in 0..{checks.SEED_MAX}, got {self.seed!r}")
        checks.choice("fidelity", self.fidelity, FIDELITIES)
        for name, allowed in (
            ("audio_fidelity", FIDELITIES),
            ("prompt_fidelity", FIDELITIES),
            ("audio_resampler", RESAMPLERS),
            ("audio_history", AUDIO_HISTORIES),
            ("audio_positions", AUDIO_POSITIONS),
        ):
            if getattr(self, name) is not None:
                checks.choice(name, getattr(self, name), allowed)
        for name, cls in (
            ("llm", LlmSampling),
            ("tts", TtsSampling),
            ("token2wav", Token2WavConfig),
            ("vision", VisionConfig),
            ("video", VideoConfig),
        ):
            if name == "tts" and self.tts is None:
                continue
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(name, f"must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        if self.max_beams is None:
            object.__setattr__(self, "max_beams", self.llm.num_beams)
        checks.int_in("max_beams", self.max_beams, 1, MAX_BEAMS)
        if self.llm.num_beams > self.max_beams:
            raise ConfigError(
                "max_beams", f"must be at least llm.num_beams ({self.llm.num_beams}), got {self.max_beams}"
            )
        if self.tts_queue is None:
            object.__setattr__(self, "tts_queue", env_int(ENV_TTS_QUEUE) or DEFAULT_QUEUE)
            checks.int_in(ENV_TTS_QUEUE, self.tts_queue, 1, 10_000)
        checks.int_in("tts_queue", self.tts_queue, 1, 10_000)
        checks.int_in("audio_queue", self.audio_queue, 1, 10_000)
        if self.pin is not None and not isinstance(self.pin, bool):
            raise ConfigError("pin", f"must be True, False or None, got {self.pin!r}")
        if self.numa_node is None:
            object.__setattr__(self, "numa_node", env_int(ENV_NUMA_NODE))
        if self.numa_node is not None:
            checks.int_in("numa_node", self.numa_node, 0, 4095)
        checks.choice("audio_mode", self.audio_mode, AUDIO_MODES)
        if not isinstance(self.prompt_cache, bool):
            raise ConfigError("prompt_cache", f"must be True or False, got {self.prompt_cache!r}")
        if not isinstance(self.exact, bool):
            raise ConfigError("exact", f"must be True or False, got {self.exact!r}")

    @property
    def tts_sampling(self) -> TtsSampling:
        """The TTS rule in force: the field, else the fidelity's."""
        if self.tts is not None:
            return self.tts
        return TtsSampling.reference() if DEFAULTS[self.fidelity].reference_tts else TtsSampling()

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
    def prompt_rule(self) -> str:
        """The prompt layout in force: the field, else the fidelity's."""
        return self.prompt_fidelity or self.fidelity

    @property
    def llm_threads(self) -> int:
        """LLM threads for libllama (0: its default)."""
        return self.threads or 0

    @property
    def module_threads(self) -> int:
        """TTS threads (the TTS runs beside the LLM; the encoders' default is the session's)."""
        return self.threads or 1


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
                f"{high} leaves no room for a unit in the LLM context ({n_ctx}); lower it or raise SessionConfig.n_ctx",
            )
        low = self.prune_to if self.prune_to is not None else high * 3 // 4
        if low >= high:
            raise ConfigError("prune_to", f"must be below max_context ({high}), got {low}")
        return high, low
