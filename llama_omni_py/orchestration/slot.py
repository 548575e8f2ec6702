"""The loaded modules of one model set on one device, each slot's stages over them, and where their
threads run.

EngineModules     what an engine loads once: the LLM (one context with a KV stream per slot),
                  the TTS and Token2Wav weights, the encoders, the CPU placement
SlotStages        one slot's stages over them, what a turn-based request (turn_based.py) and a
                  full-duplex session (duplex/) work on:
  llm          LanguageModel (the slot's sequence of the shared context)
  tts          TtsModel (shared weights, the slot's KV cache and sampler)
  token2wav    Token2Wav stream of the configured cache policy; token2wav_for(policy) makes others
  inputs       the audio and image encoders (loaded on first use)
  placement    the CPU plan: the vocoder pool's CPUs and the stage threads' CPUs
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

from .. import checks
from ..config import EngineConfig, Token2WavConfig
from ..device import placement
from ..env import numa_node_choice
from ..errors import InvalidArgumentError
from ..modelset.layout import discover, validate
from ..modules.llm.context import LlmContext
from ..modules.llm.model import LanguageModel
from ..modules.token2wav import Token2Wav
from ..modules.tts import TtsModel
from .inputs import InputEncoder

log = logging.getLogger(__name__)

MAX_DEFAULT_ENCODER_THREADS = 16  # the encoders' graphs stop scaling well beyond this


def plan_placement(device: str, config: EngineConfig, t2w: Token2WavConfig) -> placement.PlacementPlan | None:
    """The CPU placement to apply, or None (pin=False, or too few CPUs when pin=None)."""
    if config.pin is False or t2w.cpus is not None:
        return None
    plan = placement.plan_for_device(device, t2w.explicit_threads, *numa_node_choice(config.numa_node))
    if not plan.apply and config.pin is None:
        log.info("placement not applied: %s", "; ".join(plan.notes))
        return None
    log.info("placement: %s", plan.describe())
    return plan


def build_token2wav(model_dir: Path, device: str, plan, t2w: Token2WavConfig) -> Token2Wav:
    """A Token2Wav with its own weights, its vocoder pool on the plan's vocoder CPUs."""
    if plan is not None:
        t2w = replace(t2w, threads=len(plan.vocoder_cpus), cpus=plan.vocoder_cpus)
    return Token2Wav(model_dir, device, t2w)


class EngineModules:
    """Loads the LLM, TTS, Token2Wav and (lazily) the encoders of ``model_dir`` on ``device``
    once, for ``slots`` session slots. ``report(what)`` is called before each loading step."""

    STEPS = ("LLM + TTS", "placement", "Token2Wav")

    def __init__(self, model_dir: Path, device: str, config: EngineConfig, slots: int, report: Callable[[str], None]):
        report(self.STEPS[0])
        model_set = discover(model_dir)  # model_dir may name the LLM file: the encoders take the set's root
        self.model_dir, self.device, self.config = model_set.root, device, config
        validate(model_set, ["llm", "tts", "projector"], device)
        self.llm = LlmContext(
            model_set.llm,
            device,
            config.n_ctx,
            config.llm_threads,
            config.exact,
            slots,
            config.batch_invariant,
            config.prefill_chunk,
            beams=config.max_beams,
        )
        tts, projector = model_set.path("tts"), model_set.path("projector")
        self.tts = TtsModel(
            tts,
            projector,
            device,
            config.module_threads,
            config.exact,
            config.tts_ctx,
            batch_invariant=config.batch_invariant,
        )
        if self.tts.dims.llm_embd != self.llm.model.info.n_embd:
            raise InvalidArgumentError(
                f"the TTS projector expects {self.tts.dims.llm_embd}-d hidden states, "
                f"the LLM has {self.llm.model.info.n_embd}"
            )
        report(self.STEPS[1])
        self.placement = plan_placement(device, config, config.token2wav_config)
        self.inputs = InputEncoder(
            model_set.root,
            device,
            self._encoder_threads(),
            config.audio_mode_rule,
            vision=config.vision_config,
            video=config.video,
            **config.audio_rules,
        )
        report(self.STEPS[2])
        self.token2wav = build_token2wav(model_set.root, device, self.placement, config.token2wav_config)

    @property
    def slots(self) -> int:
        return self.llm.slots

    def _encoder_threads(self) -> int:
        """APM and VPM run on the LLM's thread between its calls, never beside it: by default they
        get every CPU the stage threads may use (capped at 16), as the LLM does."""
        if self.config.threads:
            return self.config.threads
        cpus = self.placement.stage_cpus if self.placement is not None else checks.usable_cpus()
        return max(1, min(len(cpus), MAX_DEFAULT_ENCODER_THREADS))

    def slot(self, seq: int) -> SlotStages:
        """Slot ``seq``'s stages: slot 0 takes the loaded TTS and Token2Wav, the others new slots
        and streams over their weights."""
        tts = self.tts if seq == 0 else self.tts.new_slot()
        token2wav = self.token2wav if seq == 0 else self.token2wav.new_stream()
        return SlotStages(self, LanguageModel.slot(self.llm, seq, self.config.prompt_cache), tts, token2wav)


class SlotStages:
    """One slot's stages (see the module docstring)."""

    def __init__(self, shared: EngineModules, llm: LanguageModel, tts: TtsModel, token2wav: Token2Wav):
        self.shared = shared
        self.model_dir, self.device, self.config = shared.model_dir, shared.device, shared.config
        self.llm, self.tts, self.token2wav = llm, tts, token2wav
        self._slot_token2wav = token2wav  # the stream over the shared weights
        self.inputs, self.placement = shared.inputs, shared.placement
        self._other_token2wav: dict[str, Token2Wav] = {}
        self._audio_stream = None

    def audio_stream(self):
        """The slot's audio encoder for live input (the shared weights, its own stream history)."""
        if self._audio_stream is None:
            self._audio_stream = self.inputs.encoders()[0].new_stream()
        return self._audio_stream

    def pin_stage_thread(self) -> None:
        """Run on each stage thread as it starts: threads the native code starts from there
        (libllama's) inherit the stage CPUs."""
        if self.placement is not None:
            placement.pin_current_thread(self.placement.stage_cpus)

    def reset(self) -> None:
        """Back to a fresh slot for its next session: empty KV caches, the slot's own Token2Wav
        stream reset (one a session reconfigured is dropped), the engine's configuration."""
        self.llm.forget()
        self.tts.start_turn()
        if self.token2wav is not self._slot_token2wav:
            self._close_token2wav()
            self.token2wav, self.placement = self._slot_token2wav, self.shared.placement
            self.config = self.shared.config
        self.token2wav.reset()
        if self._audio_stream is not None:
            self._audio_stream.reset_stream()

    # -- Token2Wav ---------------------------------------------------------------------------
    @property
    def overlap(self) -> bool:
        """Whether Token2Mel and the vocoder run as two pipeline stages (Token2WavConfig.overlap;
        by default when Token2Mel runs off the CPU)."""
        o = self.config.token2wav.overlap
        return self.token2wav.device != "cpu" if o is None else o

    def token2wav_for(self, cache_policy: str) -> Token2Wav:
        """The slot's Token2Wav, or (made once and kept) one like it with another cache policy."""
        if self.config.token2wav_config.cache_policy == cache_policy:
            return self.token2wav
        t2w = self._other_token2wav.get(cache_policy)
        if t2w is None:
            config = replace(self.config.token2wav_config, cache_policy=cache_policy)
            t2w = self._other_token2wav[cache_policy] = build_token2wav(
                self.model_dir, self.device, self.placement, config
            )
        return t2w

    def replace_token2wav(self, config: Token2WavConfig) -> None:
        """A new Token2Wav stage (vocoder threads, CPUs, steps) and its placement for this slot (its
        own weights); the old one is kept when building the new one fails."""
        resolved = replace(self.config, token2wav=config).token2wav_config  # the session's fidelity
        plan = plan_placement(self.device, self.config, resolved)
        new = build_token2wav(self.model_dir, self.device, plan, resolved)
        self._close_token2wav()
        self.placement, self.token2wav = plan, new
        self.config = replace(self.config, token2wav=config)

    def _close_token2wav(self) -> None:
        if self.token2wav is not self._slot_token2wav:
            self.token2wav.close()
        for t2w in self._other_token2wav.values():
            t2w.close()
        self._other_token2wav.clear()

    def close(self) -> None:
        self._close_token2wav()
        self._slot_token2wav.close()
