"""The Python Token2Wav API: config validation, env knobs, streaming through the package."""

import os

import numpy as np
import pytest

import llama_omni_py as omni


def test_streams_through_the_package(tiny_dir):
    with omni.Token2Wav(tiny_dir, threads=2) as t2w:
        a = t2w.push(list(range(25)))
        b = t2w.push(np.arange(25, 50))
        c = t2w.push([], final=True)
        assert (a.dtype, a.size, b.size) == (np.float32, 20160, 24000)
        assert c.size > 0 and np.isfinite(np.concatenate([a, b, c])).all()
        assert t2w.timings["windows"] == 1 and t2w.total_timings["windows"] == 3
        assert t2w.threads == 2 and t2w.cache_policy == "llama.cpp-omni"
    assert omni.Token2Wav(tiny_dir, threads=1, cache_policy="reference").cache_policy == "reference"


def test_config_names_the_bad_field(monkeypatch):
    with pytest.raises(omni.ConfigError) as e:
        omni.Token2WavConfig(steps=0)
    assert e.value.field == "steps"
    with pytest.raises(omni.ConfigError, match="temperature"):
        omni.Token2WavConfig(temperature=-1)
    with pytest.raises(omni.ConfigError, match="cpus"):
        omni.Token2WavConfig(cpus=[10**6])
    with pytest.raises(omni.ConfigError, match="one CPU per thread"):
        omni.Token2WavConfig(threads=2, cpus=[min(os.sched_getaffinity(0))])
    with pytest.raises(omni.ConfigError) as e:
        omni.Token2WavConfig(cache_policy="pytorch")
    assert e.value.field == "cache_policy"
    monkeypatch.setenv("OMNI_T2W_THREADS", "many")
    with pytest.raises(omni.ConfigError, match="OMNI_T2W_THREADS"):
        omni.Token2WavConfig()


def test_thread_defaults(monkeypatch):
    usable = len(os.sched_getaffinity(0))
    monkeypatch.delenv("OMNI_T2W_THREADS", raising=False)
    assert omni.Token2WavConfig().resolved_threads == min(16, usable)
    monkeypatch.setenv("OMNI_T2W_THREADS", "1")
    assert omni.Token2WavConfig().resolved_threads == 1
    assert omni.Token2WavConfig(threads=64).resolved_threads == usable  # capped to the usable CPUs
    cpu = min(os.sched_getaffinity(0))
    assert omni.Token2WavConfig(cpus=[cpu]).resolved_threads == 1


def test_bad_tokens_and_devices(tiny_dir):
    t2w = omni.Token2Wav(tiny_dir, threads=1)
    with pytest.raises(omni.InvalidArgumentError):
        t2w.push([7000])
    with pytest.raises(omni.InvalidArgumentError, match="integers"):
        t2w.push([0.5, 1.5])
    if "cann" not in omni.compiled_backends():
        with pytest.raises(omni.BackendUnavailableError):
            omni.Token2Wav(tiny_dir, device="cann:0")


def test_ten_step_module_set(tmp_path):
    # The reference's 10 CFM steps need a prompt cache built for 10.
    omni.make_models(tmp_path, "tiny", only=["token2wav"], cfm_steps=10)
    t2w = omni.Token2Wav(tmp_path, steps=10, threads=1)
    assert t2w.push(list(range(25))).size == 20160
    with pytest.raises(omni.ModelFileError, match="built for 10"):
        omni.Token2Wav(tmp_path, steps=5, threads=1)
    with pytest.raises(ValueError, match="cfm_steps"):
        omni.make_models(tmp_path, "tiny", only=["token2wav"], cfm_steps=0)


def _stream(t2w, tokens):
    return np.concatenate([t2w.push(tokens[:25]), t2w.push(tokens[25:50]), t2w.push([], final=True)])


def test_bf16_is_close_to_f32_or_refused(tiny_dir):
    """Opt-in BF16 (vocoder and native Token2Mel): same stream within BF16 rounding where the CPU
    has BF16 dot products; a typed error naming the missing feature where it does not."""
    tokens = list(range(100, 150))
    if not omni._core.internal.cpu_bf16():
        with pytest.raises(omni.DeviceError, match="AVX512_BF16"):
            omni.Token2Wav(tiny_dir, threads=1, bf16=True)
        return
    with omni.Token2Wav(tiny_dir, threads=1) as f32, omni.Token2Wav(tiny_dir, threads=1, bf16=True) as bf16:
        a, b = _stream(f32, tokens), _stream(bf16, tokens)
    assert a.size == b.size and not np.array_equal(a, b)  # the BF16 kernels did run
    snr = 10 * np.log10(np.sum(a.astype(np.float64) ** 2) / np.sum((a.astype(np.float64) - b) ** 2))
    assert snr > 20, snr


def test_every_cpu_kernel_set_gives_the_same_stream(tiny_dir, cpu_isa):
    """Each kernel set this CPU runs (generic, AVX2, AVX-512 / NEON) gives the stream of the best
    one within float rounding (the sets with FMA sum every output in the same order; the generic
    one multiplies and adds separately)."""
    internal = omni._core.internal
    tokens = list(range(100, 150))
    best = internal.cpu_isas()[-1]
    internal.force_cpu_isa(best)
    with omni.Token2Wav(tiny_dir, threads=2) as t2w:
        want = _stream(t2w, tokens)
    internal.force_cpu_isa(cpu_isa)
    with omni.Token2Wav(tiny_dir, threads=2) as t2w:
        got = _stream(t2w, tokens)
    assert got.size == want.size
    tol = 1e-4 if cpu_isa == "generic" else 1e-5
    assert np.max(np.abs(got - want)) <= tol * np.max(np.abs(want))
