"""A worker's knobs, validated at construction (every error names the field)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import checks
from ...config import EngineConfig, ReplyConfig
from ...constants import MAX_SLOTS


@dataclass(frozen=True)
class WorkerConfig:
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (tests)
    model_dir: str | None = None  # None: the tiny demo set (random weights)
    device: str = "auto"
    engine: EngineConfig | None = None  # None: the defaults
    reply: ReplyConfig | None = None  # the sessions' default replies; None: the set's (short on the random set)
    slots: int = 1  # sessions served at once: one OmniEngine slot each (docs/serving.md, "Slots")
    max_message_bytes: int = 256 << 20  # one WebSocket message; larger closes the socket with 1009
    # a turn's audio clips in all (a video's own audio track is not counted); a clip over 30 s is
    # clamped to 29.9 s or encoded in 30 s windows, as EngineConfig.audio_mode says
    max_audio_seconds: float = 300.0
    max_new_tokens: int | None = None  # cap on generation.max_new_tokens (None: the session's limit)
    idle_timeout_s: float = 300.0  # no message and no turn running for this long closes the session
    init_timeout_s: float = 30.0  # the first message must arrive within this
    ping_interval_s: float | None = 20.0  # WebSocket keepalive pings (None: off)
    ping_timeout_s: float | None = 20.0
    max_pending_inputs: int = 4  # pushes queued behind the running turn
    warmup: bool = True  # /health says ready only after a warm-up turn ran
    send_timeout_s: float = 10.0  # a client that reads nothing this long with a full send buffer is dropped
    compat: bool = False  # also accept the older message aliases and shapes (docs/server-protocol.md)
    # Set: every route but /health needs "Authorization: Bearer <secret>" (the gateway's), so the
    # worker serves only its gateway. None: open (a worker on a trusted host, or for tests).
    secret: str | None = field(default=None, repr=False)
    # full duplex sessions never say these (unless their config names its own): the reference's
    # bad_token_ids, read from a tokenizer_config.json (--duplex-bad-tokens)
    duplex_forbidden_token_ids: tuple = field(default=(), repr=False)

    def __post_init__(self):
        check = checks.that
        checks.listen_address(self.host, self.port)
        checks.int_in("slots", self.slots, 1, MAX_SLOTS)
        check("engine", self.engine is None or isinstance(self.engine, EngineConfig), "must be an EngineConfig")
        check("reply", self.reply is None or isinstance(self.reply, ReplyConfig), "must be a ReplyConfig")
        if self.reply is not None:
            self.reply.check_fits(self.engine or EngineConfig())
        check(
            "max_message_bytes",
            isinstance(self.max_message_bytes, int) and self.max_message_bytes >= 1024,
            "must be an integer >= 1024",
        )
        check("max_audio_seconds", 0 < self.max_audio_seconds <= 3600, "must be in (0, 3600]")
        check(
            "max_new_tokens",
            self.max_new_tokens is None or (isinstance(self.max_new_tokens, int) and self.max_new_tokens > 0),
            "must be a positive integer",
        )
        check("compat", isinstance(self.compat, bool), "must be True or False")
        check(
            "secret",
            self.secret is None or (isinstance(self.secret, str) and len(self.secret) >= 16),
            "must be a string of >= 16 characters",
        )
        ids = self.duplex_forbidden_token_ids
        check(
            "duplex_forbidden_token_ids",
            isinstance(ids, (list, tuple)) and all(checks.is_int(i) and i >= 0 for i in ids),
            "must be a list of non-negative token ids",
        )
        for name in ("idle_timeout_s", "init_timeout_s", "send_timeout_s"):
            check(name, getattr(self, name) > 0, "must be > 0")
        for name in ("ping_interval_s", "ping_timeout_s"):
            check(name, getattr(self, name) is None or getattr(self, name) > 0, "must be > 0 or None")
        check(
            "max_pending_inputs",
            isinstance(self.max_pending_inputs, int) and self.max_pending_inputs >= 0,
            "must be an integer >= 0",
        )
