"""Media extraction with the real ffmpeg (installed by .ci/run) on files generated here."""

import stat
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf

import llama_omni_py as omni
from llama_omni_py import media

FFMPEG = media.ffmpeg_binary()


def _ff(*args):
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-y", *args], check=True, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    _ff("-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=45", "-c:a", "aac", str(d / "a45.m4a"))
    _ff("-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=60", str(d / "a60.wav"))
    _ff(
        "-f",
        "lavfi",
        "-i",
        "testsrc=size=320x240:rate=10:duration=3",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=300:duration=3",
        "-shortest",
        "-c:v",
        "mpeg4",
        "-c:a",
        "aac",
        str(d / "clip.mp4"),
    )
    _ff("-f", "lavfi", "-i", "testsrc=size=64x48", "-frames:v", "1", str(d / "img.png"))
    return d


def _freq(x, sr=16000):
    spec = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return np.argmax(spec) * sr / x.size


def test_clamp_to_29_9_seconds_through_ffmpeg_and_soundfile(files):
    mp3 = media.load_audio(files / "a45.m4a")  # AAC: decoded by ffmpeg (libsndfile cannot)
    wav = media.load_audio(files / "a60.wav")  # decoded by soundfile
    for x in (mp3, wav):
        assert x.dtype == np.float32 and abs(x.size - 29.9 * 16000) <= 160  # +-1 mel frame (10 ms)
        assert abs(_freq(x[:16000]) - 440) < 3
    full = media.load_audio(files / "a60.wav", max_seconds=None)
    assert full.size == 60 * 16000


@pytest.mark.parametrize(
    "subtype,sr,channels", [("PCM_U8", 16000, 1), ("PCM_24", 16000, 1), ("PCM_16", 44100, 2), ("FLOAT", 8000, 1)]
)
def test_wav_formats_convert(tmp_path, subtype, sr, channels):
    t = np.arange(int(sr * 1.5)) / sr
    x = 0.5 * np.sin(2 * np.pi * 440 * t)
    data = np.stack([x] * channels, axis=1) if channels > 1 else x
    path = tmp_path / "in.wav"
    sf.write(path, data, sr, subtype=subtype)
    y = media.load_audio(path)
    assert abs(y.size - 1.5 * 16000) <= 1
    assert abs(_freq(y) - 440) < 3
    assert 0.4 < np.abs(y).max() < 0.55
    assert np.array_equal(media.load_audio(path.read_bytes()), y)  # bytes in, same result


def test_video_frame_and_track(files):
    frame = media.load_frame(files / "clip.mp4")
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 10
    audio = media.load_audio(files / "clip.mp4")
    assert abs(audio.size - 3 * 16000) < 1600 and abs(_freq(audio) - 300) < 5
    img = media.load_frame((files / "img.png").read_bytes())
    assert img.shape == (48, 64, 3)


def test_stills_decode_in_process_like_ffmpeg(tmp_path, monkeypatch):
    """JPEG/PNG frames skip ffmpeg (one a second in duplex) and match its decode."""
    _ff("-f", "lavfi", "-i", "testsrc2=size=540x960", "-frames:v", "1", "-q:v", "3", str(tmp_path / "f.jpg"))
    _ff("-f", "lavfi", "-i", "testsrc2=size=64x48", "-frames:v", "1", str(tmp_path / "f.png"))
    via_ffmpeg = {}
    monkeypatch.setattr(media, "_decode_still", lambda src, *rules: None)
    for name in ("f.jpg", "f.png"):
        via_ffmpeg[name] = media.load_frame(tmp_path / name)
    monkeypatch.undo()
    monkeypatch.setenv("OMNI_FFMPEG", "no-such-ffmpeg")  # proves nothing was spawned
    jpg = media.load_frame((tmp_path / "f.jpg").read_bytes())
    png = media.load_frame(tmp_path / "f.png")
    assert jpg.shape == (960, 540, 3) and jpg.dtype == np.uint8
    # the two JPEG decoders agree on flat areas and differ at colour edges (chroma upsampling:
    # libjpeg's smooth filter in Pillow, as the PyTorch reference decodes, against ffmpeg's)
    diff = np.abs(jpg.astype(int) - via_ffmpeg["f.jpg"].astype(int))
    assert np.median(diff) <= 1 and diff.mean() < 3.0
    assert np.array_equal(png, via_ffmpeg["f.png"])  # lossless: identical
    with pytest.raises(omni.MediaError, match="cannot decode"):
        media.load_frame(b"\xff\xd8\xff\xe0" + b"\x00" * 64)


def test_corrupt_input_reports_ffmpeg(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypisom" + b"\x00\x01garbage" * 100)  # an MP4 header, then nonsense
    with pytest.raises(omni.MediaError) as err:
        media.load_audio(bad)
    assert err.value.returncode not in (None, 0)
    assert err.value.stderr and err.value.command[0].endswith("ffmpeg")
    assert len(err.value.stderr) <= media.STDERR_TAIL


def test_empty_and_invalid_inputs(tmp_path):
    with pytest.raises(omni.MediaError, match="empty"):
        media.load_audio(b"")
    (tmp_path / "zero.wav").write_bytes(b"")
    with pytest.raises(omni.MediaError, match="empty"):
        media.load_audio(tmp_path / "zero.wav")
    with pytest.raises(omni.MediaError, match="no such file"):
        media.load_audio(tmp_path / "nope.wav")
    with pytest.raises(omni.MediaError, match="NaN"):
        media.load_audio(np.array([0.0, np.nan], np.float32))
    with pytest.raises(omni.MediaError, match="no samples"):
        media.load_audio(np.zeros(0, np.float32))
    with pytest.raises(omni.MediaError):
        media.load_frame(np.zeros((0, 5, 3), np.uint8))
    one = media.load_frame(np.zeros((1, 1, 3), np.uint8))  # documented: passed through, resized later
    assert one.shape == (1, 1, 3)


def test_huge_image_header_is_bounded(tmp_path):
    # A valid 20000 x 20000 PNG header over a tiny, broken body: ffmpeg fails, we raise.
    import struct
    import zlib

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00" * 100))
        + chunk(b"IEND", b"")
    )
    with pytest.raises(omni.MediaError):
        media.load_frame(png)


def _alive(pid: int) -> bool:
    """Running (a killed process may linger as a zombie until something reaps it)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def _fake_ffmpeg(tmp_path, body: str) -> str:
    path = tmp_path / "ffmpeg"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_hanging_ffmpeg_is_killed_with_its_group(tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    fake = _fake_ffmpeg(tmp_path, f"sleep 60 &\necho $! > {pidfile}\nwait\n")
    monkeypatch.setenv("OMNI_FFMPEG", fake)
    t0 = time.monotonic()
    with pytest.raises(omni.MediaError, match="did not finish"):
        media.run_ffmpeg(["-version"], timeout=0.5, retries=0)
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not _alive(child)  # the grandchild went with the process group


def test_failure_once_then_retry_succeeds(tmp_path, monkeypatch):
    marker = tmp_path / "failed-once"
    fake = _fake_ffmpeg(
        tmp_path, f'if [ ! -e {marker} ]; then touch {marker}; echo boom >&2; exit 1; fi\nexec {FFMPEG} "$@"\n'
    )
    monkeypatch.setenv("OMNI_FFMPEG", fake)
    _ff("-f", "lavfi", "-i", "sine=duration=1", "-c:a", "aac", str(tmp_path / "a.m4a"))
    x = media.load_audio(tmp_path / "a.m4a")
    assert marker.exists() and abs(x.size - 16000) < 1600


def test_missing_ffmpeg_names_the_package(monkeypatch):
    monkeypatch.setenv("OMNI_FFMPEG", "ffmpeg-that-does-not-exist")
    with pytest.raises(omni.MediaError, match="apt-get install ffmpeg"):
        media.ffmpeg_binary()


@pytest.mark.parametrize(
    "name,args",
    [
        ("a.mp3", ["-f", "lavfi", "-i", "sine=frequency=500:duration=1", "-c:a", "libmp3lame"]),
        ("a.aac", ["-f", "lavfi", "-i", "sine=frequency=500:duration=1", "-c:a", "aac"]),
        ("a.webm", ["-f", "lavfi", "-i", "sine=frequency=500:duration=1", "-c:a", "libopus"]),
        ("a.mkv", ["-f", "lavfi", "-i", "sine=frequency=500:duration=1", "-c:a", "flac"]),
    ],
)
def test_accepted_containers_still_decode(tmp_path, name, args):
    _ff(*args, str(tmp_path / name))
    x = media.load_audio((tmp_path / name).read_bytes())
    assert x.size > 8000 and abs(_freq(x) - 500) < 20


@pytest.mark.parametrize(
    "script",
    [
        b"ffconcat version 1.0\nfile 'secret.wav'\n",  # ffmpeg's concat demuxer: opens files by name
        b"#EXTM3U\n#EXTINF:1,\nsecret.wav\n",  # an HLS playlist: opens what it lists
        b"file 'secret.wav'\n",
    ],
)
def test_scripts_and_playlists_are_refused_before_ffmpeg_opens_anything(tmp_path, monkeypatch, script):
    """Bytes that ffmpeg's own probing would take for a playlist or a concat script (which read
    the local files they name) are refused by their first bytes; ffmpeg never runs on them."""
    _ff("-f", "lavfi", "-i", "sine=frequency=700:duration=1", str(tmp_path / "secret.wav"))
    monkeypatch.chdir(tmp_path)  # where a relative name inside the script would resolve
    ran = []
    monkeypatch.setattr(media, "run_ffmpeg", lambda *a, **k: ran.append(a) or b"")
    for load in (media.load_audio, media.load_frame):
        with pytest.raises(omni.MediaError, match="unsupported media format"):
            load(script)
    assert ran == []
    assert media.sniff_demuxer(script) is None


def test_gateway_images_are_sniffed_not_probed(tmp_path):
    from llama_omni_py.server.gateway import audio_codec

    _ff("-f", "lavfi", "-i", "testsrc=size=32x24", "-frames:v", "1", str(tmp_path / "i.png"))
    assert audio_codec.to_jpeg((tmp_path / "i.png").read_bytes())[:3] == b"\xff\xd8\xff"
    with pytest.raises(omni.MediaError, match="not an image"):
        audio_codec.to_jpeg(b"ffconcat version 1.0\nfile 'i.png'\n")
