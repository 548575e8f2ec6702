"""Pipeline benchmark: LLM finish time, wall RTF, compute RTF and time to first audio for TTS
queue size 1 vs 16 and pinned vs unpinned placement, alternating configurations so machine
noise hits all of them.

    python benchmarks/pipeline.py --model-dir DIR [--repeats 2] [--max-new-tokens 40] [--out FILE]

Needs a real-dimension set (`llama-omni make-models DIR --size real`: real TTS/Token2Wav, the
reduced 2-layer Qwen3). Random weights never end a TTS chunk, so each chunk is cut at
--codes-per-chunk speech codes (default 25 = 1 s of audio, about real speech's rate).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_result  # noqa: E402

import llama_omni_py as omni  # noqa: E402

TEXT = "Please tell me a short story about a lighthouse keeper and a storm."


def one(session: omni.OmniSession, queue: int, seed: int) -> dict:
    session.config = dataclasses.replace(session.config, tts_queue=queue)
    start = time.perf_counter()
    r = session.speak(TEXT, seed=seed)
    llm_end = max(e for name, s, e in session.last_events if name == "llm")
    t = r.timings
    return {"llm_finish_s": llm_end - start, "wall_rtf": t.get("wall_rtf"), "compute_rtf": t.get("compute_rtf"),
            "ttfa_s": t.get("time_to_first_audio_s"), "audio_s": t["audio_s"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--codes-per-chunk", type=int, default=25)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    base = dict(max_new_tokens=args.max_new_tokens, max_audio_per_chunk=args.codes_per_chunk)
    sessions = {"pinned": omni.OmniSession(args.model_dir, "cpu", omni.SessionConfig(pin=True, **base)),
                "unpinned": omni.OmniSession(args.model_dir, "cpu", omni.SessionConfig(pin=False, **base))}
    plan = sessions["pinned"].placement
    runs: dict[str, list[dict]] = {}
    for rep in range(args.repeats + 1):  # the first round warms up and is dropped
        for place, session in sessions.items():
            for queue in (1, 16):
                res = one(session, queue, seed=rep)
                if rep:
                    runs.setdefault(f"{place}/queue{queue}", []).append(res)
    for s in sessions.values():
        s.close()
    summary = {k: {m: statistics.median(r[m] for r in v if r[m] is not None) if any(r[m] is not None for r in v) else None
                   for m in v[0]} for k, v in runs.items()}
    for k, v in summary.items():
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"{k:<18} LLM done {fmt(v['llm_finish_s'])} s, first audio {fmt(v['ttfa_s'])} s, wall RTF "
              f"{fmt(v['wall_rtf'])}, compute RTF {fmt(v['compute_rtf'])} ({fmt(v['audio_s'])} s audio)")
    write_result("pipeline", {"summary": summary, "runs": runs, "placement": plan.describe() if plan else None}, (), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
