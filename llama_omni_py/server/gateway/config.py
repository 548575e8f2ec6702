"""Gateway knobs, validated at construction (every error names the field)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ... import checks


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (tests)
    max_queue_size: int = 1000  # tickets waiting for a worker; one more is refused (503 / 429 / error)
    queue_update_s: float = 3.0  # queue_update messages to a waiting client
    first_message_timeout_s: float = 30.0  # a /ws/chat client must send its request within this
    idle_release_s: float = 30.0  # a whole-life session idle this long gives its worker back while others wait
    idle_timeout_s: float = 300.0  # ... and this long when nobody waits
    send_buffer_bytes: int = 16 << 20  # unsent bytes for one client before it counts as a slow reader
    send_timeout_s: float = 10.0  # one send blocked this long: a slow reader
    max_message_bytes: int = 256 << 20  # one WebSocket message from a client
    max_body_bytes: int = 256 << 20  # one HTTP request body (/api/chat, /v1/chat/completions): 413 beyond
    ping_interval_s: float | None = 20.0
    ping_timeout_s: float | None = 20.0
    health_interval_s: float = 2.0  # how often each worker's /health is read
    no_worker_grace_s: float = 30.0  # queued requests fail when no live worker could serve them this long
    restart_backoff_s: tuple = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits before restarting a dead local worker
    turn_timeout_s: float = 600.0  # one request's time on a worker, queue wait excluded
    model_name: str = "MiniCPM-o-4.5"  # the id of /v1/models
    audio_ttl_s: float = 3600.0  # OpenAI audio ids stay valid (for follow-up turns) this long
    log_interval_s: float = 10.0  # repeated refusals are logged once per interval
    # OpenAI API media: file:// URLs are read only under this directory (None: never), at most
    # this many bytes of them per request; a user message's audio clips at most this long (a
    # video's own audio track is not counted); whether the workers write <image_id> before
    # images (their fidelity's layout: mm_processor_kwargs.use_image_id must match it)
    allowed_local_media_path: str | None = None
    max_local_media_bytes: int = 2 << 30
    max_audio_seconds: float = 300.0
    image_ids: bool = False
    # Non-empty: every route but /health, /v1/health and the pages needs one of these keys
    # (docs/serving.md, "Security").
    api_keys: tuple = field(default=(), repr=False)

    def __post_init__(self):
        check = checks.that
        checks.listen_address(self.host, self.port)
        check(
            "max_queue_size",
            isinstance(self.max_queue_size, int) and self.max_queue_size >= 0,
            "must be an integer >= 0",
        )
        for name in (
            "queue_update_s",
            "first_message_timeout_s",
            "idle_release_s",
            "idle_timeout_s",
            "send_timeout_s",
            "health_interval_s",
            "no_worker_grace_s",
            "turn_timeout_s",
            "audio_ttl_s",
            "log_interval_s",
        ):
            v = getattr(self, name)
            check(name, isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "must be a number > 0")
        check("idle_release_s", self.idle_release_s <= self.idle_timeout_s, "must be <= idle_timeout_s")
        backoff = tuple(self.restart_backoff_s)
        check(
            "restart_backoff_s",
            backoff and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in backoff),
            "must be a non-empty list of seconds >= 0",
        )
        v = self.send_buffer_bytes  # one second of audio is a 128 KiB message
        check("send_buffer_bytes", isinstance(v, int) and v >= 1 << 18, "must be an integer >= 262144")
        for name in ("max_message_bytes", "max_body_bytes"):
            v = getattr(self, name)
            check(name, isinstance(v, int) and v >= 1024, "must be an integer >= 1024")
        for name in ("ping_interval_s", "ping_timeout_s"):
            check(name, getattr(self, name) is None or getattr(self, name) > 0, "must be > 0 or None")
        check("model_name", isinstance(self.model_name, str) and self.model_name.strip(), "must be a non-empty string")
        root = self.allowed_local_media_path
        check(
            "allowed_local_media_path",
            root is None or (isinstance(root, str) and os.path.isabs(root) and os.path.isdir(root)),
            "must be None or the absolute path of an existing directory",
        )
        v = self.max_local_media_bytes
        check(
            "max_local_media_bytes",
            isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "must be an integer >= 0",
        )
        v = self.max_audio_seconds
        check(
            "max_audio_seconds",
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 3600,
            "must be a number in (0, 3600]",
        )
        check("image_ids", isinstance(self.image_ids, bool), "must be True or False")
        keys = tuple(self.api_keys)
        check(
            "api_keys",
            all(isinstance(k, str) and len(k) >= 8 and k == k.strip() for k in keys),
            "must be strings of at least 8 characters without surrounding spaces",
        )
        object.__setattr__(self, "api_keys", keys)
