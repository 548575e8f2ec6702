"""A run's records: one JSON line per item, appended as it finishes (so an interrupted run
resumes where it stopped), and the progress line with its ETA."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path


class RecordStore:
    """``records.jsonl`` in the run's folder. Lines written before (a resumed run) are read back
    once; a torn last line (the process was killed mid-write) is dropped and redone."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "records.jsonl"
        self.records: dict[str, dict] = {}
        if self.path.exists():
            good = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                self.records[rec["id"]] = rec
                good.append(line)
            self.path.write_text("".join(x + "\n" for x in good), encoding="utf-8")
        self._lock = threading.Lock()

    def done(self, item_id: str) -> bool:
        return item_id in self.records

    def add(self, record: dict) -> None:
        with self._lock:
            self.records[record["id"]] = record
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.flush()


class Progress:
    """``[n/total] pct elapsed ETA`` on stderr, redrawn in place (tqdm when it is installed)."""

    def __init__(self, total: int, done: int = 0, label: str = "eval", stream=None):
        self.total, self.n, self.label = total, done, label
        self.stream = stream or sys.stderr
        self._t0, self._first = time.perf_counter(), done
        self._bar = None
        try:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done, desc=label, file=self.stream, dynamic_ncols=True)
        except ImportError:
            self._draw()

    def eta_s(self) -> float | None:
        ran = self.n - self._first
        if ran <= 0:
            return None
        return (time.perf_counter() - self._t0) / ran * (self.total - self.n)

    def step(self, k: int = 1) -> None:
        self.n += k
        if self._bar is not None:
            self._bar.update(k)
        else:
            self._draw()

    def _draw(self) -> None:
        eta = self.eta_s()
        left = "?" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
        pct = 100.0 * self.n / max(1, self.total)
        self.stream.write(f"\r{self.label} [{self.n}/{self.total}] {pct:5.1f}% ETA {left}")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self.stream.write("\n")
