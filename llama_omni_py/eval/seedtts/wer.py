"""Seed-TTS word error rate, scored the way seed-tts-eval's ``run_wer.py`` and
``average_wer.py`` score it (facts: docs/evaluation.md#seed-tts-wer-and-sim).

Per utterance: every character of ``zhon.hanzi.punctuation + string.punctuation`` except the
ASCII apostrophe is deleted from both texts, one pass of double-space to single-space follows,
then Chinese text is split into characters (so the "WER" is a character error rate) and English
text is lower-cased. A Chinese hypothesis is first converted to simplified characters
(``zhconv``, ``zh-cn``); the reference never is. jiwer aligns the two word lists.

Over a set: ``wer`` is the mean of the per-utterance rates (the number seed-tts-eval prints),
``wer_pooled`` is all errors over all reference words, ``wer_normalized_lce`` is llama.cpp-omni's
``WER_NORMALIZED`` (per-utterance rates weighted by the *raw* reference's whitespace word count:
for Chinese, which has no spaces, every weight is 1 and it equals the mean), and ``wer_below50``
the mean over utterances whose rate is at most 0.5.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...errors import ConfigError, EmptyTranscriptError, InvalidArgumentError, MediaError
from .. import deps as _deps

LANGUAGES = ("zh", "en")


@functools.lru_cache(maxsize=1)
def punctuation() -> str:
    """The characters deleted before scoring: zhon's Chinese punctuation, then ASCII punctuation,
    without the apostrophe (kept so that "don't" stays one word)."""
    zhon = _deps.require("zhon.hanzi", package="zhon")
    return "".join(c for c in zhon.punctuation + string.punctuation if c != "'")


def _check_lang(lang: str) -> None:
    if lang not in LANGUAGES:
        raise ConfigError("lang", f"Seed-TTS WER is defined for {LANGUAGES}, not {lang!r}")


def to_simplified(text: str) -> str:
    """A Chinese hypothesis in simplified characters (``zhconv.convert(text, "zh-cn")``)."""
    return _deps.require("zhconv").convert(text, "zh-cn")


def normalize(text: str, lang: str) -> str:
    """The text jiwer compares: punctuation deleted, one double-space pass, then per-character
    spacing (zh) or lower case (en)."""
    _check_lang(lang)
    for c in punctuation():
        text = text.replace(c, "")
    text = text.replace("  ", " ")
    return " ".join(text) if lang == "zh" else text.lower()


@dataclass(frozen=True)
class UtteranceWER:
    """One utterance's alignment. ``reference`` and ``hypothesis`` are the texts as scored (the
    hypothesis after the zh-cn conversion for Chinese), before normalisation."""

    key: str
    reference: str
    hypothesis: str
    wer: float
    substitutions: int
    deletions: int
    insertions: int
    hits: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def ref_words(self) -> int:
        """Words (zh: characters) of the normalised reference."""
        return self.substitutions + self.deletions + self.hits

    def ratios(self, lang: str) -> tuple[float, float, float]:
        """(insertions, deletions, substitutions) over ``len(normalised_ref.split(" "))``, the
        denominators seed-tts-eval writes per line (it counts empty strings between spaces)."""
        n = len(normalize(self.reference, lang).split(" "))
        return self.insertions / n, self.deletions / n, self.substitutions / n

    def line(self, lang: str) -> str:
        """seed-tts-eval's per-utterance line: key, wer, raw texts, ins, del, sub (tab-separated)."""
        ins, dele, subs = self.ratios(lang)
        return f"{self.key}\t{self.wer}\t{self.reference}\t{self.hypothesis}\t{ins}\t{dele}\t{subs}"


def score_utterance(reference: str, hypothesis: str, lang: str, key: str = "") -> UtteranceWER:
    """Align one hypothesis with its reference. An empty hypothesis scores 1.0 (all deletions);
    a reference with no words left after normalisation is an EmptyTranscriptError."""
    _check_lang(lang)
    if lang == "zh":
        hypothesis = to_simplified(hypothesis)
    ref, hyp = normalize(reference, lang), normalize(hypothesis, lang)
    if not ref.split():
        raise EmptyTranscriptError(reference, key)
    jiwer = _deps.require("jiwer")
    out = jiwer.process_words(ref, hyp)  # the default word transform, as compute_measures used
    return UtteranceWER(
        key, reference, hypothesis, float(out.wer), out.substitutions, out.deletions, out.insertions, out.hits
    )


def _round_pct(x: float) -> float:
    return round(x * 100, 3)


@dataclass(frozen=True)
class WERSummary:
    """Rates over a set, as fractions (``report_lines`` prints percentages). ``skipped`` lists
    the keys that were not scored and why."""

    lang: str
    utterances: tuple[UtteranceWER, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())

    @property
    def n(self) -> int:
        return len(self.utterances)

    def _need(self) -> None:
        if not self.utterances:
            raise InvalidArgumentError("no utterance was scored: a WER over an empty set is undefined")

    @property
    def wer(self) -> float:
        """Mean of the per-utterance rates (seed-tts-eval ``WER``)."""
        self._need()
        return float(np.mean([u.wer for u in self.utterances]))

    @property
    def wer_pooled(self) -> float:
        """All errors over all normalised reference words (the corpus WER)."""
        self._need()
        return sum(u.errors for u in self.utterances) / sum(u.ref_words for u in self.utterances)

    @property
    def wer_normalized_lce(self) -> float:
        """llama.cpp-omni ``WER_NORMALIZED``: rates weighted by the raw reference's
        ``len(text.split())`` (1 for unspaced Chinese)."""
        self._need()
        weights = [len(u.reference.split()) for u in self.utterances]
        return sum(u.wer * w for u, w in zip(self.utterances, weights)) / sum(weights)

    @property
    def below50(self) -> tuple[UtteranceWER, ...]:
        return tuple(u for u in self.utterances if u.wer <= 0.5)

    @property
    def wer_below50(self) -> float | None:
        """Mean rate over the utterances at or below 0.5 (None when there are none)."""
        kept = self.below50
        return float(np.mean([u.wer for u in kept])) if kept else None

    def as_dict(self) -> dict:
        b50 = self.wer_below50
        return {
            "lang": self.lang,
            "n": self.n,
            "skipped": len(self.skipped),
            "wer": self.wer,
            "wer_pooled": self.wer_pooled,
            "wer_normalized_lce": self.wer_normalized_lce,
            "wer_below50": b50,
            "n_below50": len(self.below50),
        }

    def report_lines(self) -> list[str]:
        """seed-tts-eval's ``WER:`` line, llama.cpp-omni's ``WER_BELOW50`` and ``WER_NORMALIZED``
        lines (in their formats), and the pooled rate."""
        b50 = self.wer_below50
        n50 = len(self.below50)
        return [
            f"WER: {_round_pct(self.wer)}%",
            f"WER_BELOW50: {_round_pct(b50) if b50 is not None else 'nan'}% ,WERS_NORM_BELOW50: {n50}, "
            f"WER_BELOW50_RATIO: {n50 / self.n}%",
            f"WER_NORMALIZED: {_round_pct(self.wer_normalized_lce)}%",
            f"WER_POOLED: {_round_pct(self.wer_pooled)}%",
        ]


def summarize(utterances: Sequence[UtteranceWER], lang: str, skipped: Sequence[tuple[str, str]] = ()) -> WERSummary:
    _check_lang(lang)
    return WERSummary(lang, tuple(utterances), tuple(skipped))


def evaluate(items: Iterable[tuple[str, str]], asr, lang: str, *, skip_missing: bool = True) -> WERSummary:
    """Transcribe each ``(wav_path, reference)`` with ``asr`` and score it. A missing wav is
    skipped (and listed in ``skipped``) as seed-tts-eval skips it, or raises with
    ``skip_missing=False``."""
    _check_lang(lang)
    scored, skipped = [], []
    for wav, ref in items:
        try:
            hyp = asr.transcribe(wav)
        except MediaError as e:
            if not skip_missing:
                raise
            skipped.append((wav, str(e)))
            continue
        scored.append(score_utterance(ref, hyp, lang, key=wav))
    return summarize(scored, lang, skipped)
