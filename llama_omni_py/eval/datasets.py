"""The benchmarks' data in their published layouts (docs/evaluation.md#datasets), as items.

* Daily-Omni (HF ``liarliar/Daily-Omni``): ``qa.json`` and ``Videos/{id}/{id}_video.mp4`` with
  ``{id}_audio.wav`` beside each video.
* Video-MME (HF ``lmms-lab/Video-MME``): a parquet of its questions (``videomme/test-*.parquet``)
  and the videos, ``{videoID}.mp4`` anywhere under the folder (the zips unpack to ``data/``).
* Seed-TTS (``seed-tts-eval``): ``meta.lst`` lines ``utt|prompt_text|prompt_wav|text[|wav]``,
  the prompt wav relative to the list's folder.

Sampling keeps a benchmark's composition: ``stratified`` is llama.cpp-omni's Video-MME rule
(its ``VIDEOMME_SAMPLE_RATIO``), deterministic, by video.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidArgumentError

DAILY_OMNI_GROUPS = ("qa_type", "content_parent_category", "video_category", "video_duration")
VIDEOMME_GROUPS = ("duration", "domain", "task_type", "sub_category")


@dataclass(frozen=True)
class McqItem:
    """One question: its id, video (and separate audio track), question, choices, answer letter
    and the fields it is grouped by."""

    id: str
    video_id: str
    video: Path
    audio: Path | None
    question: str
    choices: tuple
    answer: str
    groups: dict = field(default_factory=dict)

    @property
    def missing(self) -> str | None:
        """What of its media is missing on disk, or None."""
        for p in (self.video, self.audio):
            if p is not None and not p.is_file():
                return str(p)
        return None


def daily_omni(data: str | Path) -> list[McqItem]:
    """Daily-Omni's questions in qa.json order."""
    root = Path(data)
    qa = root / "qa.json"
    if not qa.is_file():
        raise InvalidArgumentError(f"{root}: no qa.json (the Daily-Omni folder has qa.json and Videos/)")
    try:
        rows = json.loads(qa.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InvalidArgumentError(f"{qa}: not JSON ({e})") from None
    if not isinstance(rows, list):
        raise InvalidArgumentError(f"{qa}: expected a list of questions")
    items = []
    for i, r in enumerate(rows):
        try:
            vid = str(r["video_id"])
            folder = root / "Videos" / vid
            groups = {"qa_type": r.get("Type", ""), **{k: r.get(k, "") for k in DAILY_OMNI_GROUPS[1:]}}
            items.append(
                McqItem(
                    f"{i:05d}-{vid}",
                    vid,
                    folder / f"{vid}_video.mp4",
                    folder / f"{vid}_audio.wav",
                    str(r["Question"]),
                    tuple(str(c) for c in r["Choice"]),
                    str(r["Answer"]).strip().upper(),
                    groups,
                )
            )
        except (KeyError, TypeError) as e:
            raise InvalidArgumentError(f"{qa}: question {i} lacks {e}") from None
    return items


def videomme(data: str | Path, durations=("short", "medium", "long")) -> list[McqItem]:
    """Video-MME's questions in parquet order, of the given durations."""
    from .deps import require

    pd = require("pandas", purpose="Video-MME's parquet")
    require("pyarrow", purpose="Video-MME's parquet")
    root = Path(data)
    files = sorted(root.glob("**/*.parquet"))
    if not files:
        raise InvalidArgumentError(f"{root}: no Video-MME parquet (videomme/test-00000-of-00001.parquet)")
    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    videos = {p.stem: p for p in root.glob("**/*.mp4")}
    items = []
    for r in df.to_dict("records"):
        if str(r.get("duration", "")).lower() not in durations:
            continue
        stem = str(r.get("videoID") or r["video_id"])
        groups = {k: str(r.get(k, "")) for k in VIDEOMME_GROUPS}
        groups["duration"] = groups["duration"].lower()
        items.append(
            McqItem(
                str(r.get("question_id") or f"{r['video_id']}-{len(items)}"),
                str(r["video_id"]),
                videos.get(stem, root / "data" / f"{stem}.mp4"),
                None,
                str(r["question"]),
                tuple(str(o) for o in r["options"]),
                str(r["answer"]).strip().upper(),
                groups,
            )
        )
    return items


def stratified(items: list[McqItem], ratio: float, keys: tuple) -> list[McqItem]:
    """llama.cpp-omni's Video-MME sampling, for any benchmark: videos grouped into strata by
    ``keys`` (first-seen order), round(N * ratio) videos in all (half up, at least one), each
    stratum its floor share plus one for the largest remainders (ties: the earlier stratum), taken
    at the middles of equal intervals of the stratum; every question of a chosen video is kept, in
    the original order. No randomness."""
    if not 0 < ratio <= 1:
        raise InvalidArgumentError(f"sample ratio must be in (0, 1], got {ratio}")
    first: dict[str, McqItem] = {}
    for it in items:
        first.setdefault(it.video_id, it)
    strata: dict[tuple, list[str]] = {}
    for vid, it in first.items():
        strata.setdefault(tuple(it.groups.get(k, "") for k in keys), []).append(vid)
    if ratio == 1 or not first:
        return list(items)
    target = max(1, math.floor(len(first) * ratio + 0.5))
    exact = {k: len(v) * ratio for k, v in strata.items()}
    quota = {k: math.floor(x) for k, x in exact.items()}
    order = list(strata)
    spare = sorted(order, key=lambda k: (-(exact[k] - quota[k]), order.index(k)))
    for k in spare[: max(0, target - sum(quota.values()))]:
        quota[k] += 1
    chosen = set()
    for k, vids in strata.items():
        q = quota[k]
        picks = range(len(vids)) if q >= len(vids) else [((2 * i + 1) * len(vids)) // (2 * q) for i in range(q)]
        chosen.update(vids[i] for i in picks)
    return [it for it in items if it.video_id in chosen]


@dataclass(frozen=True)
class TtsItem:
    """One Seed-TTS line: the utterance id, the prompt's transcript and wav, the text to say."""

    id: str
    prompt_text: str
    prompt_wav: Path
    text: str

    @property
    def missing(self) -> str | None:
        return None if self.prompt_wav.is_file() else str(self.prompt_wav)


def seed_tts(meta: str | Path) -> list[TtsItem]:
    """A seed-tts-eval meta list: ``utt|prompt_text|prompt_wav|text[|wav]`` per line."""
    path = Path(meta)
    if not path.is_file():
        raise InvalidArgumentError(f"no such meta list: {path}")
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) not in (4, 5):
            raise InvalidArgumentError(
                f"{path}:{n}: expected utt|prompt_text|prompt_wav|text[|wav], got {len(fields)} fields"
            )
        utt, prompt_text, prompt_wav, text = fields[:4]
        items.append(TtsItem(utt, prompt_text, path.parent / prompt_wav, text))
    return items


def limited(items: list, limit: int | None) -> list:
    if limit is not None and limit < 1:
        raise InvalidArgumentError(f"--limit must be at least 1, got {limit}")
    return items[:limit] if limit else items
