"""The engine options of a worker, written once: ``llama-omni worker`` and ``llama-omni serve``
get their flags from the fields, a local worker process gets them back as argv (``to_argv``), a
Ray worker actor gets the object itself (it pickles), and each worker turns them into its
WorkerConfig (``server_config``)."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields

from ..modelset.hub_cli import MODEL_HELP, QUANT_HELP, RANDOM_SET_DEFAULT, resolved_model


def _opt(default, help: str, type=None, aliases: tuple[str, ...] = ()):  # noqa: A002 -- argparse's names
    return field(default=default, metadata={"help": help, "type": type, "aliases": aliases})


@dataclass(frozen=True)
class WorkerOptions:
    model_dir: str | None = _opt(None, f"{MODEL_HELP} ({RANDOM_SET_DEFAULT})", str, ("--model",))
    llm_quant: str | None = _opt(None, QUANT_HELP, str)
    hub: str | None = _opt(None, "where a repository id comes from: huggingface or modelscope (default: OMNI_HUB)", str)
    slots: int = _opt(1, "sessions served at once, each on its own slot of one loaded model set (docs/serving.md)", int)
    batch_invariant: bool = _opt(
        False, "with --slots > 1: each slot's replies bit for bit what a lone session gives, without batching gain"
    )
    threads: int | None = _opt(None, "LLM/TTS CPU threads (default: libllama's)", int)
    max_new_tokens: int = _opt(
        0, "cap on LLM tokens per turn: requests asking for more get this many (0: 256, 60 with the demo set)", int
    )
    t2w_threads: int | None = _opt(None, "vocoder threads (default: OMNI_T2W_THREADS or up to 16)", int)
    max_audio_per_chunk: int = _opt(
        0, "speech codes per 10-token chunk before it is cut (0: 500, 50 with the demo set)", int
    )
    max_message_mb: float = _opt(
        256.0, "largest WebSocket message (and, with serve, HTTP body): a 60 s clip with its track as data URLs", float
    )
    max_audio_seconds: float = _opt(
        300.0, "a turn's audio clips in all (a video's own audio track is not counted)", float
    )
    idle_timeout: float = _opt(300.0, "seconds without a message before a session closes", float)
    fidelity: str = _opt(
        "llama.cpp-omni", "llama.cpp-omni or reference: whose rules where they differ (docs/fidelity.md)", str
    )
    compat: bool = _opt(False, "/backend also accepts the older message aliases and shapes (docs/server-protocol.md)")
    duplex_bad_tokens: str | None = _opt(
        None,
        "a MiniCPM-o tokenizer_config.json: full duplex never says its bad_token_ids, as the reference's decoder",
        str,
    )

    def __post_init__(self):
        from .. import checks
        from ..constants import MAX_SLOTS

        checks.int_in("slots", self.slots, 1, MAX_SLOTS)

    @staticmethod
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        for f in fields(cls):
            kind, help_text, names = f.metadata["type"], f.metadata["help"], (*f.metadata["aliases"], cls.flag(f.name))
            if kind is None:  # a switch
                parser.add_argument(*names, dest=f.name, action="store_true", help=help_text)
            else:
                parser.add_argument(*names, dest=f.name, type=kind, default=f.default, help=help_text)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorkerOptions:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    def to_argv(self) -> list[str]:
        """The flags that give these options to ``llama-omni worker`` (defaults left out)."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == (f.default if f.default is not MISSING else None):
                continue
            out += [self.flag(f.name)] if f.metadata["type"] is None else [self.flag(f.name), str(value)]
        return out

    def configs(self, numa_node: int | None = None):
        """(EngineConfig, ReplyConfig) of the worker's engine and its sessions' default replies."""
        from ..config import EngineConfig, Token2WavConfig
        from ..modelset.random_set import reply_for

        engine = EngineConfig(
            threads=self.threads,
            token2wav=Token2WavConfig(threads=self.t2w_threads),
            fidelity=self.fidelity,
            batch_invariant=self.batch_invariant,
            numa_node=numa_node,
        )
        reply: dict = {}
        if self.max_new_tokens:
            reply["max_new_tokens"] = self.max_new_tokens
        if self.max_audio_per_chunk:
            reply["max_audio_per_chunk"] = self.max_audio_per_chunk
        return engine, reply_for(self.model_dir, **reply)

    def server_config(self, host: str, port: int, device: str, numa_node: int | None = None, secret: str | None = None):
        """The worker's WorkerConfig on host:port with its engine on ``device``; ``secret``: the
        gateway's (every route but /health then needs it)."""
        from ..duplex import bad_token_ids
        from .worker.config import WorkerConfig

        engine, reply = self.configs(numa_node)
        # a repository id is fetched here, on the worker's host (a Ray actor's may be another)
        model_dir = resolved_model(self.model_dir, self.llm_quant, self.hub, device)
        forbidden = bad_token_ids(self.duplex_bad_tokens) if self.duplex_bad_tokens else ()
        return WorkerConfig(
            host=host,
            port=port,
            model_dir=model_dir,
            device=device,
            engine=engine,
            reply=reply,
            slots=self.slots,
            max_new_tokens=reply.max_new_tokens,  # a cap, not only a default
            max_message_bytes=int(self.max_message_mb * 2**20),
            max_audio_seconds=self.max_audio_seconds,
            idle_timeout_s=self.idle_timeout,
            compat=self.compat,
            secret=secret,
            duplex_forbidden_token_ids=forbidden,
        )
