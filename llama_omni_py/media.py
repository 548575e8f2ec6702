"""Media extraction: audio -> 16 kHz mono float32, video/image -> one RGB frame.

Every ffmpeg command is built with ffmpeg-python and run under a timeout in its own process
group (SIGTERM to the group at the timeout, SIGKILL 5 s later), with one retry after 200 ms and
stderr captured; failures raise :class:`MediaError` with the return code, the command and the
last 512 characters of stderr. WAV/FLAC/OGG decode through soundfile and JPEG/PNG stills through
Pillow without spawning ffmpeg (a duplex session receives a camera frame every second).

Audio is clamped to 29.9 s by default: the audio encoder's position table holds 30 s, and
llama.cpp-omni aborts the whole process past it. ``max_seconds=None`` keeps everything (the
caller then encodes in windows).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Union

import numpy as np

from .constants import INPUT_SAMPLE_RATE as SAMPLE_RATE
from .env import ffmpeg_name, ffprobe_name
from .errors import MediaError

MAX_AUDIO_SECONDS = 29.9
FFMPEG_TIMEOUT = 30.0
KILL_GRACE = 5.0
RETRY_DELAY = 0.2
STDERR_TAIL = 512
FRAME_TIME = 0.5  # seconds into a video for its frame (past typical fade-ins); 0 if shorter
MAX_SIDE = 4096  # longest image side kept while decoding
MAX_STILL_PIXELS = 8192 * 8192  # larger JPEG/PNG headers are refused before decoding
_STILL_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")

Source = Union[str, os.PathLike, bytes, bytearray, memoryview, np.ndarray]

# The containers ffmpeg may open, by their first bytes, and the demuxer each is opened with. ffmpeg
# is never left to guess: its probing would also accept playlists and scripts (concat, HLS, ...)
# that open further files or URLs named inside them.
AUDIO_FORMATS = "WAV, MP3, AAC, FLAC, Ogg, M4A/MP4/MOV, WebM/Matroska"
VIDEO_FORMATS = "MP4/MOV, WebM/Matroska, AVI, MPEG-TS"
IMAGE_FORMATS = "JPEG, PNG, WebP, GIF, BMP"


def sniff_demuxer(head: bytes) -> str | None:
    """The ffmpeg demuxer for a file starting with ``head`` (at least 12 bytes when there are),
    or None when it is none of the accepted formats."""
    if head[:4] == b"RIFF":
        return {b"WAVE": "wav", b"WEBP": "webp_pipe", b"AVI ": "avi"}.get(head[8:12])
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[4:8] in (b"ftyp", b"moov", b"mdat", b"wide", b"free", b"skip"):
        return "mov"
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg_pipe"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png_pipe"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:2] == b"BM":
        return "bmp_pipe"
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:  # MPEG audio frame sync
        return "aac" if head[1] & 0x06 == 0 else "mp3"  # layer bits 00: ADTS (AAC)
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:
        return "mpegts"
    return None


def _ffmpeg_input(path: str, **options):
    """ffmpeg-python's input for ``path`` with its demuxer named and only the file protocol."""
    import ffmpeg

    with open(path, "rb") as f:
        head = f.read(200)
    demuxer = sniff_demuxer(head)
    if demuxer is None:
        raise MediaError(
            "unsupported media format (accepted: audio "
            + AUDIO_FORMATS
            + "; video "
            + VIDEO_FORMATS
            + "; images "
            + IMAGE_FORMATS
            + ")"
        )
    return ffmpeg.input(path, f=demuxer, protocol_whitelist="file", **options)


def demuxer_args(path: str) -> list[str]:
    """The input options that open ``path`` with its sniffed demuxer and only the file protocol,
    for a command line built by hand (ffprobe, frame selection)."""
    with open(path, "rb") as f:
        demuxer = sniff_demuxer(f.read(200))
    if demuxer is None:
        raise MediaError("unsupported video format (accepted: " + VIDEO_FORMATS + ")")
    return ["-f", demuxer, "-protocol_whitelist", "file"]


def ffmpeg_binary(tool: str = "ffmpeg") -> str:
    """Path of ffmpeg or ffprobe (OMNI_FFMPEG / OMNI_FFPROBE override); a clear error naming the
    package when absent."""
    name = ffmpeg_name() if tool == "ffmpeg" else ffprobe_name()
    path = shutil.which(name)
    if not path:
        raise MediaError(
            f"{tool} was not found ('{name}'); install it, e.g. `apt-get install ffmpeg` "
            "(Debian/Ubuntu package 'ffmpeg')"
        )
    return path


def run_ffmpeg(
    args: list[str],
    data: bytes | None = None,
    *,
    timeout: float = FFMPEG_TIMEOUT,
    retries: int = 1,
    tool: str = "ffmpeg",
) -> bytes:
    """Runs ffmpeg (or ``tool="ffprobe"``) with `args` (feeding `data` on stdin); returns stdout."""
    cmd = [ffmpeg_binary(tool), *args]
    last: MediaError | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(RETRY_DELAY)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            err = _stop_group(proc)
            last = MediaError(
                f"{tool} did not finish within {timeout:g} s",
                returncode=proc.returncode,
                command=cmd,
                stderr=_tail(err),
            )
            continue
        if proc.returncode == 0:
            return out
        last = MediaError(f"{tool} failed", returncode=proc.returncode, command=cmd, stderr=_tail(err))
    raise last


def stream_ffmpeg_frames(args: list[str], *, timeout: float = FFMPEG_TIMEOUT) -> Iterator[np.ndarray]:
    """Runs ffmpeg with ``args`` writing PPM images to stdout and yields each as (h, w, 3) uint8
    as soon as it is read, so that only one frame is held at a time. The whole run is bounded by
    ``timeout`` (the process group is killed then); a failure raises MediaError with ffmpeg's
    stderr, and a failure before the first frame is retried once."""
    cmd = [ffmpeg_binary(), *args]
    for attempt in range(2):
        if attempt:
            time.sleep(RETRY_DELAY)
        run = _FrameRun(cmd, timeout)
        yielded = 0
        try:
            while True:
                frame = _read_ppm(run.proc.stdout)
                if frame is None:
                    run.at_end = True
                    break
                yielded += 1
                yield frame
        finally:
            run.finish()
        if run.failure() is None:
            return
        if yielded or attempt:
            raise run.failure()


class _FrameRun:
    """One ffmpeg process whose stdout is read as it goes: stderr collected on a thread, the
    process group killed at the deadline or when the reader stops early."""

    def __init__(self, cmd: list[str], timeout: float):
        self.cmd, self.timeout, self.at_end = cmd, timeout, False
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        self._err: list[bytes] = []
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self.expired = threading.Event()
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.start()

    def _read_stderr(self) -> None:
        self._err.append(self.proc.stderr.read())

    def _expire(self) -> None:
        self.expired.set()
        self._kill()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> None:
        if not self.at_end:  # the caller stopped early, or a frame was malformed
            self._kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(KILL_GRACE, self.timeout))
        self._timer.cancel()
        self.proc.stdout.close()
        self._reader.join(KILL_GRACE)

    def failure(self) -> MediaError | None:
        stderr = _tail(self._err[0] if self._err else b"")
        if self.expired.is_set():
            return MediaError(f"ffmpeg did not finish within {self.timeout:g} s", command=self.cmd, stderr=stderr)
        if self.proc.returncode == 0 or not self.at_end:
            return None
        return MediaError("ffmpeg failed", returncode=self.proc.returncode, command=self.cmd, stderr=stderr)


def _read_ppm(f) -> np.ndarray | None:
    """The next binary PPM (P6, 8-bit) image of a stream, or None at its end."""
    fields: list[bytes] = []
    token = b""
    while len(fields) < 4:
        c = f.read(1)
        if not c:
            if fields or token:
                raise MediaError("truncated frame from ffmpeg")
            return None
        if c.isspace():
            if token:
                fields.append(token)
                token = b""
        else:
            token += c
    if fields[0] != b"P6" or fields[3] != b"255":
        raise MediaError("ffmpeg returned an unexpected image format")
    w, h = int(fields[1]), int(fields[2])
    pixels = f.read(w * h * 3)
    if len(pixels) != w * h * 3:
        raise MediaError("truncated frame from ffmpeg")
    return np.frombuffer(pixels, dtype=np.uint8).reshape(h, w, 3).copy()


def _stop_group(proc: subprocess.Popen) -> bytes:
    """SIGTERM to the process group, SIGKILL after KILL_GRACE; returns what stderr held. Bounded
    in time even when a process outside the group (a setsid grandchild) keeps our pipes open:
    then we stop reading them."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            _, err = proc.communicate(timeout=KILL_GRACE)
            return err or b""
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    return b"(ffmpeg's output was still held open by a process outside its group; stopped reading)"


def _tail(err: bytes | None) -> str:
    return (err or b"").decode("utf-8", "replace")[-STDERR_TAIL:]


@contextlib.contextmanager
def _as_path(src: Source):
    """A file path for a path or in-memory media (bytes go to a temporary file: containers such
    as MP4 need a seekable input, which a pipe is not)."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src)
        if not data:
            raise MediaError("empty input (0 bytes)")
        with tempfile.NamedTemporaryFile(prefix="omni-media-") as f:
            f.write(data)
            f.flush()
            yield f.name
        return
    if not isinstance(src, (str, os.PathLike)):
        raise MediaError(f"media must be a path, bytes or a numpy array, got {type(src).__name__}")
    path = Path(os.fspath(src))
    if path.is_dir():
        raise MediaError(f"{path} is a directory, not a media file")
    if not path.is_file():
        raise MediaError(f"no such file: {path}")
    if path.stat().st_size == 0:
        raise MediaError(f"empty file: {path}")
    yield str(path)


def resample(x: np.ndarray, sr: int, target: int = SAMPLE_RATE, method: str = "band-limited") -> np.ndarray:
    """Mono samples from ``sr`` to ``target`` Hz. ``"band-limited"``: in the frequency domain (no
    ffmpeg, no scipy); ``"linear"``: as llama.cpp-omni's audio decoder does it (linear
    interpolation and a 4th-order low-pass, docs/fidelity.md), in the core."""
    if sr == target or x.size == 0:
        return x.astype(np.float32, copy=False)
    if method == "linear":
        from ._native import core

        return core.resample_linear(np.ascontiguousarray(x, np.float32), int(sr), int(target))
    n_out = int(round(x.size * target / sr))
    spec = np.fft.rfft(x.astype(np.float64))
    keep = min(spec.size, n_out // 2 + 1)
    out = np.zeros(n_out // 2 + 1, dtype=np.complex128)
    out[:keep] = spec[:keep]
    return (np.fft.irfft(out, n_out) * (n_out / x.size)).astype(np.float32)


def _check_audio(x: np.ndarray, max_seconds: float | None) -> np.ndarray:
    if x.size == 0:
        raise MediaError("the audio has no samples")
    if not np.isfinite(x).all():
        raise MediaError("the audio contains NaN or infinite samples")
    if max_seconds is not None:
        x = x[: int(round(max_seconds * SAMPLE_RATE))]
    return np.ascontiguousarray(x, dtype=np.float32)


def load_audio(
    src: Source,
    max_seconds: float | None = MAX_AUDIO_SECONDS,
    *,
    timeout: float = FFMPEG_TIMEOUT,
    resampler: str = "band-limited",
) -> np.ndarray:
    """Audio as 16 kHz mono float32 in [-1, 1], at most `max_seconds` (None: all of it).

    numpy input is taken as 16 kHz samples (mono, or channels-last stereo mixed down). Files at
    another rate that soundfile reads (WAV, FLAC, OGG) are converted by ``resampler``
    (:func:`resample`); others are decoded and converted by ffmpeg."""
    if isinstance(src, np.ndarray):
        x = np.asarray(src, dtype=np.float32)
        if x.ndim == 2:
            x = x.mean(axis=1)
        if x.ndim != 1:
            raise MediaError(f"audio arrays must be 1-D (or (n, channels)), got shape {src.shape}")
        return _check_audio(x, max_seconds)
    import soundfile as sf

    with _as_path(src) as path:
        try:  # WAV / FLAC / OGG: no subprocess
            x, sr = sf.read(path, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError, TypeError):
            x = None
        if x is not None:
            mono = x.mean(axis=1)
            if max_seconds is not None:
                mono = mono[: int(round(max_seconds * sr)) + 1]
            return _check_audio(resample(mono, sr, method=resampler), max_seconds)
        import ffmpeg  # ffmpeg-python builds the command line

        inp = _ffmpeg_input(path, t=max_seconds) if max_seconds is not None else _ffmpeg_input(path)
        args = (
            ffmpeg.output(inp.audio, "pipe:1", format="f32le", acodec="pcm_f32le", ac=1, ar=SAMPLE_RATE)
            .global_args("-nostdin", "-hide_banner", "-loglevel", "error")
            .compile(cmd="ffmpeg")[1:]
        )
        with _missing_stream("audio"):
            out = run_ffmpeg(args, timeout=timeout)
    return _check_audio(np.frombuffer(out, dtype="<f4"), max_seconds)


def _parse_ppm(buf: bytes) -> np.ndarray:
    """The first binary PPM (P6) image in `buf` as (h, w, 3) uint8."""
    fields, pos = [], 0
    while len(fields) < 4:
        while pos < len(buf) and buf[pos : pos + 1].isspace():
            pos += 1
        if buf[pos : pos + 1] == b"#":
            pos = buf.index(b"\n", pos) + 1
            continue
        end = pos
        while end < len(buf) and not buf[end : end + 1].isspace():
            end += 1
        fields.append(buf[pos:end])
        pos = end
    if fields[0] != b"P6":
        raise MediaError("ffmpeg returned an unexpected image format")
    w, h, maxval = int(fields[1]), int(fields[2]), int(fields[3])
    if maxval != 255:
        raise MediaError("only 8-bit frames are supported")
    pixels = buf[pos + 1 : pos + 1 + w * h * 3]
    if len(pixels) != w * h * 3:
        raise MediaError("truncated frame from ffmpeg")
    return np.frombuffer(pixels, dtype=np.uint8).reshape(h, w, 3).copy()


def load_frame(
    src: Source, at: float = FRAME_TIME, *, timeout: float = FFMPEG_TIMEOUT, jpeg_decoder: str = "pillow"
) -> np.ndarray:
    """One RGB frame (h, w, 3) uint8 of a video (`at` seconds in, or its first frame when the video
    is shorter) or of an image file. A JPEG still is decoded by ``jpeg_decoder``: ``"pillow"``
    (libjpeg) or ``"stb_image"`` (llama.cpp-omni's decoder, whose IDCT, chroma upsampling and
    colour conversion round differently; docs/fidelity.md)."""
    if isinstance(src, np.ndarray):
        img = np.asarray(src)
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8 or 0 in img.shape:
            raise MediaError(f"images must be non-empty (h, w, 3) uint8 arrays, got {img.dtype} {img.shape}")
        return img
    still = _decode_still(src, jpeg_decoder)
    if still is not None:
        return still
    import ffmpeg

    def grab(path: str, seek: float) -> np.ndarray | None:
        inp = _ffmpeg_input(path, ss=seek) if seek > 0 else _ffmpeg_input(path)
        # Longest side capped at MAX_SIDE while decoding: a hostile header cannot make us hold a
        # 20000x20000 frame (the vision encoder works on 448-px tiles anyway).
        v = inp.video.filter(
            "scale", f"min({MAX_SIDE},iw)", f"min({MAX_SIDE},ih)", force_original_aspect_ratio="decrease"
        )
        args = (
            ffmpeg.output(v, "pipe:1", vframes=1, format="image2pipe", vcodec="ppm", pix_fmt="rgb24")
            .global_args("-nostdin", "-hide_banner", "-loglevel", "error")
            .compile(cmd="ffmpeg")[1:]
        )
        out = run_ffmpeg(args, timeout=timeout)
        return _parse_ppm(out) if out else None

    with _as_path(src) as path, _missing_stream("video"):
        frame = grab(path, at) if at > 0 else None
        if frame is None:
            frame = grab(path, 0.0)
    if frame is None:
        raise MediaError("the input has no video frame")
    return frame


def _still_bytes(src: Source) -> bytes | None:
    """The bytes of a JPEG or PNG still (in memory, or a file of at most 64 MiB), else None."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src[:8])
        return bytes(src) if data.startswith(_STILL_MAGIC) else None
    if isinstance(src, (str, os.PathLike)):
        path = Path(os.fspath(src))
        try:
            if not path.is_file() or path.stat().st_size > 64 << 20:
                return None
            with path.open("rb") as f:
                if not f.read(8).startswith(_STILL_MAGIC):
                    return None
                return path.read_bytes()
        except OSError:
            return None  # ffmpeg's path reports it
    return None


def _decode_still(src: Source, jpeg_decoder: str = "pillow") -> np.ndarray | None:
    """A JPEG/PNG decoded in process, its longest side capped at MAX_SIDE; None for anything else."""
    data = _still_bytes(src)
    if data is None:
        return None
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            if w * h > MAX_STILL_PIXELS:
                raise MediaError(f"the image is {w}x{h}: more than {MAX_STILL_PIXELS} pixels")
            if jpeg_decoder == "stb_image" and im.format == "JPEG" and max(w, h) <= MAX_SIDE:
                return _stb_decode(data)
            if max(w, h) > MAX_SIDE:
                im.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a reduced scale already
                im.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.BICUBIC)
            rgb = np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise MediaError(f"cannot decode the image: {e}") from None
    if 0 in rgb.shape:
        raise MediaError("the image is empty")
    return np.ascontiguousarray(rgb)


def _stb_decode(data: bytes) -> np.ndarray:
    """A JPEG decoded by stb_image (the libstb package), as llama.cpp-omni decodes it."""
    try:
        import libstb
    except ImportError:
        raise MediaError(
            "JPEG decoding as llama.cpp-omni does it needs the libstb package (pip install libstb), "
            "or VisionConfig(jpeg_decoder='pillow')"
        ) from None
    try:
        img = libstb.Image.open(np.frombuffer(data, np.uint8), channels=3)
    except (ValueError, OSError, libstb.DecodeError, libstb.LimitError) as e:
        raise MediaError(f"cannot decode the image: {e}") from None
    rgb = np.array(img.numpy(), dtype=np.uint8).reshape(img.height, img.width, 3)
    if 0 in rgb.shape:
        raise MediaError("the image is empty")
    return rgb


# What ffmpeg says when the input lacks the stream a command selects.
_NO_STREAM = ("matches no streams", "does not contain any stream", "Output file does not contain any stream")


@contextlib.contextmanager
def _missing_stream(kind: str):
    """Turns ffmpeg's wording for a missing stream into a plain MediaError naming it."""
    try:
        yield
    except MediaError as e:
        if any(p in e.stderr for p in _NO_STREAM):
            raise MediaError(f"the input has no {kind} stream", returncode=e.returncode, command=e.command) from e
        raise
