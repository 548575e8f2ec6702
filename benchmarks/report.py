"""Benchmark runs (JSON from `llama-omni bench`) -> a Markdown table and PNG plots, runs side by side.

    python benchmarks/report.py bench-results/*.json [--out DIR]

Writes DIR/report.md, DIR/rtf_vs_threads.png (median wall and pooled compute RTF against the
vocoder thread count, one line per pinning/queue setting), DIR/stage_breakdown.png (median LLM,
TTS and Token2Wav ms per chunk index, one panel per run) and DIR/first_audio_cdf.png (the
distribution of time to first audio per run). Needs matplotlib (`pip install ".[bench]"`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on benchmark hosts
import matplotlib.pyplot as plt  # noqa: E402

from llama_omni_py.bench.schema import validate_run  # noqa: E402
from llama_omni_py.bench.summary import markdown_table, stage_table  # noqa: E402

STAGES = ("llm", "tts", "token2wav")


def load_runs(paths) -> list[dict]:
    runs = []
    for p in paths:
        run = json.loads(Path(p).read_text())
        validate_run(run)
        runs.append(run)
    return runs


def plot_rtf_vs_threads(runs: list[dict], path: Path) -> None:
    groups: dict[str, list[tuple[int, float | None, float | None]]] = {}
    for r in runs:
        c, s = r["config"], r["summary"]
        groups.setdefault(f"{c['pinning']}, queue {c['tts_queue']}", []).append(
            (c["t2w_threads"], s["wall_rtf"], s["compute_rtf_pooled"])
        )
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, pts in sorted(groups.items()):
        pts.sort()
        x = [p[0] for p in pts]
        (line,) = ax.plot(x, [p[1] for p in pts], "o-", label=f"wall RTF ({name})")
        ax.plot(x, [p[2] for p in pts], "s--", color=line.get_color(), label=f"compute RTF ({name})")
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="Token2Wav vocoder threads", ylabel="RTF (median; lower is better)", title="RTF vs threads")
    ax.set_xticks(sorted({r["config"]["t2w_threads"] for r in runs}))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _per_chunk_medians(run: dict) -> dict[str, list[float]]:
    longest = max(len(q["chunks"]) for q in run["requests"])
    out = {}
    for s in STAGES:
        out[s] = [
            statistics.median([q["chunks"][i][f"{s}_ms"] or 0.0 for q in run["requests"] if i < len(q["chunks"])])
            for i in range(longest)
        ]
    return out


def plot_stage_breakdown(runs: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs) + 1, 4), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], runs):
        med = _per_chunk_medians(run)
        x = range(len(med[STAGES[0]]))
        bottom = [0.0] * len(x)
        for s in STAGES:
            ax.bar(x, med[s], bottom=bottom, label=s)
            bottom = [b + v for b, v in zip(bottom, med[s])]
        ax.set(title=run["label"], xlabel="chunk (0: first, last: flush)")
        ax.title.set_fontsize(8)
    axes[0][0].set_ylabel("median ms per chunk")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("stage cost per chunk")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_first_audio_cdf(runs: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        v = sorted(q["time_to_first_audio_s"] for q in run["requests"] if q["time_to_first_audio_s"] is not None)
        if v:
            ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=run["label"])
    ax.set(
        xlabel="time to first audio (s)", ylabel="fraction of requests", title="first-audio latency CDF", ylim=(0, 1.05)
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(runs: list[dict], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plot_rtf_vs_threads(runs, out / "rtf_vs_threads.png")
    plot_stage_breakdown(runs, out / "stage_breakdown.png")
    plot_first_audio_cdf(runs, out / "first_audio_cdf.png")
    m = runs[0]["manifest"]
    lines = [
        "# Benchmark report",
        "",
        f"{len(runs)} runs; host: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, backends "
        f"{', '.join(m['compiled_backends'])}; commit {m['git']['commit'] or 'unknown'}"
        f"{' (dirty)' if m['git']['dirty'] else ''}. Medians over each run's measured requests "
        "(warm-ups excluded); compute RTF in brackets is pooled over steady chunks.",
        "",
        markdown_table(runs),
        "",
        "## Per prompt (medians)",
        "",
        stage_table(runs),
        "",
        "![RTF vs threads](rtf_vs_threads.png)",
        "![stage breakdown](stage_breakdown.png)",
        "![first audio CDF](first_audio_cdf.png)",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run JSON files")
    ap.add_argument("--out", default="bench-report", help="output directory")
    a = ap.parse_args(argv)
    runs = load_runs(a.runs)
    path = write_report(runs, Path(a.out))
    print(path.read_text().split("\n## ")[0])
    print(f"wrote {path} and 3 PNG plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
