"""Tiny datasets in each benchmark's published layout, for the eval tests: Daily-Omni's qa.json
and Videos/{id}/{id}_video.mp4 + {id}_audio.wav, a Video-MME parquet with its videos, and a
Seed-TTS meta.lst with prompt wavs. Videos are ffmpeg test sources with espeak-ng speech."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf
from speech import say
from video_files import video

CHOICES = ["A. A man playing a guitar", "B. A dog barking at the door", "C. Two children laughing", "D. Rain"]


def daily_omni(root: Path, missing_video: bool = False) -> Path:
    """Three questions over two 3 s videos (and, with ``missing_video``, a fourth whose video is
    not there)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for vid, text in (("vid001", "a dog barks at the door"), ("vid002", "two children are laughing")):
        speech = say(text)[: 3 * 16000]
        speech = np.pad(speech, (0, 3 * 16000 - speech.size))  # the track as long as the video, as Daily-Omni's
        video(root / "Videos" / vid / f"{vid}_video.mp4", 3.0, speech=speech)
        sf.write(root / "Videos" / vid / f"{vid}_audio.wav", speech, 16000)
    for i, (vid, answer, qtype, dur) in enumerate(
        [
            ("vid001", "B", "AV Event Alignment", "30s"),
            ("vid001", "A", "Reasoning", "30s"),
            ("vid002", "C", "Inference", "60s"),
        ]
    ):
        rows.append(
            {
                "Question": f"What is heard in clip {i}?",
                "Choice": CHOICES,
                "Answer": answer,
                "video_id": vid,
                "Type": qtype,
                "content_parent_category": "Sound",
                "content_fine_category": "Animals",
                "video_category": "Pets",
                "video_duration": dur,
                "Explaination": "",
            }
        )
    if missing_video:
        rows.append({**rows[0], "video_id": "vid404", "Question": "Gone?"})
    (root / "qa.json").write_text(json.dumps(rows, ensure_ascii=False))
    return root


def videomme(root: Path) -> Path:
    """Two videos, three questions each, as Video-MME's parquet lays them out."""
    import pandas as pd

    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, (vid, dur, domain) in enumerate((("001", "short", "Knowledge"), ("002", "medium", "Sports"))):
        stem = f"clip{vid}"
        video(root / "data" / f"{stem}.mp4", 2.0 + n, tone=None)
        for q in range(3):
            rows.append(
                {
                    "video_id": vid,
                    "duration": dur,
                    "domain": domain,
                    "sub_category": "Humanity & History" if n == 0 else "Football",
                    "url": "",
                    "videoID": stem,
                    "question_id": f"{vid}-{q + 1}",
                    "task_type": "Counting Problem" if q else "Action Recognition",
                    "question": f"Question {q} about {stem}?",
                    "options": ["A. one", "B. two", "C. three", "D. four"],
                    "answer": "ABCD"[q],
                }
            )
    (root / "videomme").mkdir(exist_ok=True)
    pd.DataFrame(rows).to_parquet(root / "videomme" / "test-00000-of-00001.parquet")
    return root


def seed_tts(root: Path) -> Path:
    """zh/meta.lst with three lines and their prompt wavs."""
    zh = root / "zh"
    (zh / "prompt-wavs").mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (prompt, text) in enumerate(
        (("hello there", "你好，欢迎。"), ("good morning", "今天天气很好。"), ("thank you", "谢谢。"))
    ):
        sf.write(zh / "prompt-wavs" / f"p{i}.wav", say(prompt), 16000)
        lines.append(f"utt{i}|{prompt}|prompt-wavs/p{i}.wav|{text}")
    (zh / "meta.lst").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return zh / "meta.lst"
