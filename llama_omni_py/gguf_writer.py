"""A small, streaming GGUF v3 writer (metadata + tensors), deterministic byte for byte.

Tensors are declared first (name, ggml shape, dtype) so the header can be written before any
data exists; data is then streamed tensor by tensor, in chunks, so multi-GB files never sit in
memory.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

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

    def write(self, data: Callable[[str, tuple[int, ...], str], Iterable[np.ndarray]]) -> None:
        """``data(name, ne, dtype)`` yields the tensor's elements (flat, C order of numpy's
        reversed shape) in one or more chunks of the right dtype."""
        tmp = self.path.with_suffix(self.path.suffix + ".partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            self._write(f, data)
        tmp.replace(self.path)  # never leave a half-written file under the real name

    def _write(self, f: BinaryIO, data) -> None:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv)))
        for kv in self._kv:
            f.write(kv)
        offset = 0
        for name, ne, dtype in self._tensors:
            f.write(_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne))
            f.write(struct.pack("<IQ", GGML_TYPES[dtype][0], offset))
            offset += self.nbytes(ne, dtype)
            offset += -offset % ALIGNMENT
        f.write(b"\0" * (-f.tell() % ALIGNMENT))
        for name, ne, dtype in self._tensors:
            want, written = self.nbytes(ne, dtype), 0
            np_dtype = GGML_TYPES[dtype][1]
            for chunk in data(name, ne, dtype):
                chunk = np.ascontiguousarray(chunk, dtype=np_dtype)
                f.write(chunk.tobytes())
                written += chunk.nbytes
            if written != want:
                raise ValueError(f"tensor {name}: wrote {written} bytes, expected {want}")
            f.write(b"\0" * (-written % ALIGNMENT))
