"""A small, streaming GGUF v3 writer (metadata + tensors), deterministic byte for byte.

Tensors are declared first (name, ggml shape, dtype) so the header can be written before any
data exists; data is then streamed tensor by tensor, in chunks, so multi-GB files never sit in
memory. With ``workers > 1`` several tensors are produced at once, each written at its own
offset: the bytes are the same as with one worker (every tensor's data depends on the tensor
alone), and numpy's generators and conversions release the GIL, so threads scale.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from .cache_write import temp_name

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

_SCALAR = {
    "uint8": (0, "<B"),
    "int8": (1, "<b"),
    "uint16": (2, "<H"),
    "int16": (3, "<h"),
    "uint32": (4, "<I"),
    "int32": (5, "<i"),
    "float32": (6, "<f"),
    "bool": (7, "<?"),
    "uint64": (10, "<Q"),
    "int64": (11, "<q"),
    "float64": (12, "<d"),
}
_STRING, _ARRAY = 8, 9
# ggml type ids and element sizes of the dtypes we write.
GGML_TYPES = {"f32": (0, np.dtype("<f4")), "f16": (1, np.dtype("<f2")), "i32": (26, np.dtype("<i4"))}


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype: str, value) -> bytes:
    if vtype == "string":
        return struct.pack("<I", _STRING) + _string(value)
    if vtype.endswith("[]"):
        elem = vtype[:-2]
        if elem == "string":
            body = b"".join(_string(v) for v in value)
            return struct.pack("<IIQ", _ARRAY, _STRING, len(value)) + body
        code, fmt = _SCALAR[elem]
        arr = np.asarray(value, dtype=np.dtype(fmt))
        return struct.pack("<IIQ", _ARRAY, code, len(arr)) + arr.tobytes()
    code, fmt = _SCALAR[vtype]
    return struct.pack("<I", code) + struct.pack(fmt, value)


class GgufWriter:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._kv: list[bytes] = []
        self._keys: set[str] = set()
        self._tensors: list[tuple[str, tuple[int, ...], str]] = []

    def add(self, key: str, vtype: str, value) -> None:
        if key in self._keys:
            raise ValueError(f"duplicate metadata key {key!r}")
        self._keys.add(key)
        self._kv.append(_string(key) + _value(vtype, value))

    def declare(self, name: str, ne: tuple[int, ...], dtype: str) -> None:
        if dtype not in GGML_TYPES:
            raise ValueError(f"unsupported dtype {dtype!r} for {name}")
        self._tensors.append((name, tuple(int(x) for x in ne), dtype))

    @staticmethod
    def nbytes(ne: tuple[int, ...], dtype: str) -> int:
        return int(np.prod(ne, dtype=np.int64)) * GGML_TYPES[dtype][1].itemsize

    def write(self, data: Callable[[str, tuple[int, ...], str], Iterable[np.ndarray]], workers: int = 1) -> None:
        """``data(name, ne, dtype)`` yields the tensor's elements (flat, C order of numpy's
        reversed shape) in one or more chunks of the right dtype. ``workers > 1`` calls ``data``
        for several tensors at once, from threads (same bytes as one worker)."""
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        # This writer's own temporary name, moved onto the real one in one step: a reader never
        # sees a half-written file, and two writers of the same file never share one.
        tmp = temp_name(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(tmp, "wb") as f:
                if workers == 1:
                    self._write(f, data)
                else:
                    self._write_parallel(f, data, workers)
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def _header(self) -> tuple[bytes, list[int]]:
        """The header up to the data section (padded) and each tensor's offset in that section."""
        parts = [GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv)), *self._kv]
        offsets, offset = [], 0
        for name, ne, dtype in self._tensors:
            parts.append(_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne))
            parts.append(struct.pack("<IQ", GGML_TYPES[dtype][0], offset))
            offsets.append(offset)
            offset += self.nbytes(ne, dtype)
            offset += -offset % ALIGNMENT
        head = b"".join(parts)
        return head + b"\0" * (-len(head) % ALIGNMENT), offsets

    def _chunks(self, data, name: str, ne: tuple[int, ...], dtype: str) -> Iterable[np.ndarray]:
        want, written = self.nbytes(ne, dtype), 0
        np_dtype = GGML_TYPES[dtype][1]
        for chunk in data(name, ne, dtype):
            chunk = np.ascontiguousarray(chunk, dtype=np_dtype)
            written += chunk.nbytes
            if written > want:
                break
            yield chunk
        if written != want:
            raise ValueError(f"tensor {name}: wrote {written} bytes, expected {want}")

    def _write(self, f: BinaryIO, data) -> None:
        head, _ = self._header()
        f.write(head)
        for name, ne, dtype in self._tensors:
            for chunk in self._chunks(data, name, ne, dtype):
                f.write(chunk.tobytes())
            f.write(b"\0" * (-self.nbytes(ne, dtype) % ALIGNMENT))

    def _write_parallel(self, f: BinaryIO, data, workers: int) -> None:
        head, offsets = self._header()
        f.write(head)
        f.flush()
        end = len(head) + (offsets[-1] + self.nbytes(*self._tensors[-1][1:]) if self._tensors else 0)
        os.truncate(f.fileno(), end + (-end % ALIGNMENT))  # padding between tensors reads as zeros
        fd = f.fileno()

        def one(i: int) -> None:
            name, ne, dtype = self._tensors[i]
            pos = len(head) + offsets[i]
            for chunk in self._chunks(data, name, ne, dtype):
                view = memoryview(chunk).cast("B")
                while view:
                    n = os.pwrite(fd, view, pos)
                    view, pos = view[n:], pos + n

        # Largest first, so one big tensor does not start last and run alone.
        order = sorted(range(len(self._tensors)), key=lambda i: -self.nbytes(*self._tensors[i][1:]))
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(one, order):
                pass
