"""The loaded stages of one model set on one device, and where their threads run: what a simplex
request (simplex.py) and a full-duplex session (duplex/) both work on. OmniSession builds one.

    StageBundle
      llm          LanguageModel (libllama)
      tts          TtsModel (projector + decoder + sampler)
      token2wav    Token2Wav of the configured cache policy; token2wav_for(policy) makes others
      inputs       the audio and image encoders (loaded on first use)
      placement    the CPU plan: the vocoder pool's CPUs and the stage threads' CPUs
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

from . import checks, placement
from .config import SessionConfig, Token2WavConfig, numa_node_choice
from .errors import InvalidArgumentError
from .inputs import InputEncoder
from .llm import LanguageModel
from .modelset.layout import discover, validate
from .token2wav import Token2Wav
from .tts import TtsModel

log = logging.getLogger(__name__)

MAX_DEFAULT_ENCODER_THREADS = 16  # the encoders' graphs stop scaling well beyond this


class StageBundle:
    """Loads the LLM, TTS, Token2Wav and (lazily) the encoders of ``model_dir`` on ``device``.
    ``report(what)`` is called before each loading step."""

    STEPS = ("LLM + TTS", "placement", "Token2Wav")

    def __init__(self, model_dir: Path, device: str, config: SessionConfig, report: Callable[[str], None]):
        self.model_dir, self.device, self.config = model_dir, device, config
        c = config
        report(self.STEPS[0])
        model_set = discover(model_dir)
        validate(model_set, ["llm", "tts", "projector"], device)
        self.llm = LanguageModel(model_set.llm, device, c.n_ctx, c.llm_threads, c.exact, c.prompt_cache)
        tts, projector = model_set.path("tts"), model_set.path("projector")
        self.tts = TtsModel(tts, projector, device, c.module_threads, c.exact, c.tts_ctx)
        if self.tts.dims.llm_embd != self.llm.n_embd:
            raise InvalidArgumentError(
                f"the TTS projector expects {self.tts.dims.llm_embd}-d hidden states, the LLM has {self.llm.n_embd}"
            )
        report(self.STEPS[1])
        self.placement = self._plan(c.token2wav_config)
        self.inputs = InputEncoder(
            model_dir, device, self._encoder_threads(), c.audio_mode, c.stack_frames, c.audio_rule, c.vision_config
        )
        report(self.STEPS[2])
        self.token2wav = self._token2wav(c.token2wav_config)
        self._other_token2wav: dict[str, Token2Wav] = {}

    # -- placement ---------------------------------------------------------------------------
    def _plan(self, t2w: Token2WavConfig) -> placement.PlacementPlan | None:
        """The CPU placement to apply, or None (pin=False, or too few CPUs when pin=None)."""
        if self.config.pin is False or t2w.cpus is not None:
            return None
        plan = placement.plan_for_device(self.device, t2w.explicit_threads, *numa_node_choice(self.config.numa_node))
        if not plan.apply and self.config.pin is None:
            log.info("placement not applied: %s", "; ".join(plan.notes))
            return None
        log.info("placement: %s", plan.describe())
        return plan

    def _encoder_threads(self) -> int:
        """APM and VPM run on the LLM's thread between its calls, never beside it: by default they
        get every CPU the stage threads may use (capped at 16), as the LLM does."""
        if self.config.threads:
            return self.config.threads
        cpus = self.placement.stage_cpus if self.placement is not None else checks.usable_cpus()
        return max(1, min(len(cpus), MAX_DEFAULT_ENCODER_THREADS))

    def pin_stage_thread(self) -> None:
        """Run on each stage thread as it starts: threads the native code starts from there
        (libllama's) inherit the stage CPUs."""
        if self.placement is not None:
            placement.pin_current_thread(self.placement.stage_cpus)

    # -- Token2Wav ---------------------------------------------------------------------------
    def _token2wav(self, t2w: Token2WavConfig) -> Token2Wav:
        if self.placement is not None:
            t2w = replace(t2w, threads=len(self.placement.vocoder_cpus), cpus=self.placement.vocoder_cpus)
        return Token2Wav(self.model_dir, self.device, t2w)

    @property
    def overlap(self) -> bool:
        """Whether Token2Mel and the vocoder run as two pipeline stages (Token2WavConfig.overlap;
        by default when Token2Mel runs off the CPU)."""
        o = self.config.token2wav.overlap
        return self.token2wav.device != "cpu" if o is None else o

    def token2wav_for(self, cache_policy: str) -> Token2Wav:
        """The bundle's Token2Wav, or (made once and kept) one like it with another cache policy."""
        if self.config.token2wav_config.cache_policy == cache_policy:
            return self.token2wav
        t2w = self._other_token2wav.get(cache_policy)
        if t2w is None:
            t2w = self._other_token2wav[cache_policy] = self._token2wav(
                replace(self.config.token2wav_config, cache_policy=cache_policy)
            )
        return t2w

    def replace_token2wav(self, config: Token2WavConfig) -> None:
        """A new Token2Wav stage (vocoder threads, CPUs, steps) and its placement; the old one is
        kept when building the new one fails."""
        old_plan, old_t2w = self.placement, self.token2wav
        resolved = replace(self.config, token2wav=config).token2wav_config  # the session's fidelity
        self.placement = self._plan(resolved)
        try:
            self.token2wav = self._token2wav(resolved)
        except BaseException:
            self.placement = old_plan
            raise
        old_t2w.close()
        for t2w in self._other_token2wav.values():
            t2w.close()
        self._other_token2wav.clear()
        self.config = replace(self.config, token2wav=config)

    def close(self) -> None:
        self.token2wav.close()
        for t2w in self._other_token2wav.values():
            t2w.close()
