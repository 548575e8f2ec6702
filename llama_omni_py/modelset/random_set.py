"""The random set: a module set with random weights, written once to the user cache, and the
short-reply defaults that suit it (random weights never emit the speech end code, so every text
chunk would otherwise speak for 20 s of noise). It is what runs when no model is named."""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import EngineConfig, ReplyConfig
from ..env import cache_dir
from ..errors import OmniError

log = logging.getLogger(__name__)

RANDOM_SET_MAX_NEW_TOKENS = 60
RANDOM_SET_AUDIO_PER_CHUNK = 50  # about 2 s of audio per 10 text tokens, like real speech


def random_set_reply(**overrides) -> ReplyConfig:
    """The reply settings the random set runs with (short replies)."""
    return ReplyConfig(
        **{"max_new_tokens": RANDOM_SET_MAX_NEW_TOKENS, "max_audio_per_chunk": RANDOM_SET_AUDIO_PER_CHUNK, **overrides}
    )


def random_set_config(engine: EngineConfig | None = None, **reply_fields) -> tuple[EngineConfig, ReplyConfig]:
    """(engine configuration, reply settings) for the random set: ``engine`` (else the defaults)
    and its short replies with ``reply_fields`` over them."""
    return engine or EngineConfig(), random_set_reply(**reply_fields)


def reply_for(model_dir, **fields) -> ReplyConfig:
    """Reply settings with ``fields`` over the defaults of the set: the random set's short replies
    when ``model_dir`` is None, else ReplyConfig's own."""
    return random_set_reply(**fields) if model_dir is None else ReplyConfig(**fields)


def random_set_dir(size: str = "tiny") -> Path:
    """A random-weight set in the user cache (tiny: the default set; real: the benchmark set,
    about 6.5 GB), generated on first use. The directory keeps its first name, demo-models, so
    that sets written before are reused. Processes that start together write it once: the first
    writes it (under a lock, into a temporary directory moved into place when whole), the others
    wait for it and use its files."""
    from .cache_write import build_once
    from .generate import make_models
    from .layout import discover, validate

    def complete(root: Path) -> bool:
        try:  # missing, or written by an older version whose files the loaders no longer accept
            validate(discover(root))
        except OmniError:
            return False
        return True

    def build(tmp: Path) -> None:
        make_models(tmp, size=size)
        validate(discover(tmp))  # a set that does not validate is never moved into place

    name = "demo-models" if size == "tiny" else f"demo-models-{size}"
    root = build_once(cache_dir() / name, build, complete, f"the random set ({size})")
    log.warning(
        "using the random set: random weights, so the reply text is gibberish and the "
        "audio is noise; pass --model (model_dir in Python) for a real MiniCPM-o-4_5-gguf set"
    )
    return root
