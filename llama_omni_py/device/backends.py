"""Backends and devices: what this build can run on, and validation of device strings.

A device string is ``"auto"``, ``"cpu"``, or ``"<backend>:<index>"`` (``"cuda:0"``,
``"cann:1"``; a bare ``"cuda"`` means index 0). Asking for a backend this build lacks raises
:class:`BackendUnavailableError` with the command that builds it; nothing falls back to the
CPU silently.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ..env import set_unset
from ..errors import BackendUnavailableError, DeviceError

log = logging.getLogger(__name__)


def _core():
    """The compiled core, loaded when a device is first asked about (importing this module loads
    nothing native: the gateway names devices without computing on them)."""
    from .._native import core

    return core


# Backends users ask for by name, with the CMake switch that compiles them into ggml.
_BUILD_FLAGS = {
    "cuda": "-DGGML_CUDA=on",
    "cann": "-DGGML_CANN=on -DSOC_TYPE=<your SoC, e.g. Ascend910B3>",
    "vulkan": "-DGGML_VULKAN=on",
    "metal": "-DGGML_METAL=on",
    "sycl": "-DGGML_SYCL=on",
}
# Preference of "auto": the accelerator a deployment was built for wins over the CPU.
_AUTO_ORDER = ("cann", "cuda", "metal", "vulkan", "sycl")

# Known-good CANN settings (README, "Building for Ascend"): the NZ weight layout breaks F16
# output, and ACL graph mode aborts the vision encoder on 910B. Applied only when the user left
# them unset, and before any CANN backend is initialised: ggml-cann reads them lazily, when a
# backend context is created and when the first weight is uploaded.
CANN_ENV_DEFAULTS = {"GGML_CANN_WEIGHT_NZ": "off", "GGML_CANN_ACL_GRAPH": "off"}

_DEVICE_RE = re.compile(r"^(?P<backend>[a-z][a-z0-9]*)(?::(?P<index>\d+))?$")


@dataclass(frozen=True)
class Device:
    """A compute device of this build."""

    id: str
    backend: str
    index: int
    name: str
    description: str
    pci_bus_id: str
    memory_total: int
    memory_free: int


def build_recipe(backend: str) -> str:
    """The shell commands that rebuild llama.cpp and this package with ``backend``."""
    flags = _BUILD_FLAGS.get(backend, f"-DGGML_{backend.upper()}=on")
    prefix = "source /usr/local/Ascend/ascend-toolkit/set_env.sh\n" if backend == "cann" else ""
    return (
        f'{prefix}CMAKE_ARGS="{flags}" pip install --no-cache-dir --force-reinstall '
        "--no-deps llama-cpp-python==0.3.36\n"
        "pip install --no-build-isolation --force-reinstall --no-deps .   # from the llama-omni-py source tree\n"
        "(or build llama.cpp yourself and set OMNI_LLAMA_CPP_DIR; see the README)"
    )


def devices() -> list[Device]:
    """Every selectable device of this build (the CPU first, then accelerators)."""
    return [
        Device(d.id, d.backend, d.index, d.ggml_name, d.description, d.pci_bus_id, d.memory_total, d.memory_free)
        for d in _core().list_devices()
    ]


def backends() -> list[str]:
    """Device ids this build can use: always ``"cpu"``, plus ``"cuda:N"``, ``"cann:N"``, ... present."""
    return [d.id for d in devices()]


def compiled_backends() -> list[str]:
    """Backends compiled into the linked ggml, with or without a device present."""
    return list(_core().compiled_backends())


def resolve_device(spec: str) -> str:
    """Validates a device string and returns the canonical id of an available device.

    Raises :class:`DeviceError` for a malformed string or a missing device index, and
    :class:`BackendUnavailableError` (with the build recipe) for a backend this build lacks.
    """
    if not isinstance(spec, str):
        raise DeviceError(f"device must be a string like 'cpu', 'cuda:0' or 'cann:0', got {type(spec).__name__}")
    spec = spec.strip().lower()
    available = devices()
    if spec == "auto":
        for backend in _AUTO_ORDER:
            for d in available:
                if d.backend == backend:
                    log.info("device 'auto' resolved to %s (%s)", d.id, d.description)
                    if backend == "cann":
                        apply_cann_environment()
                    return d.id
        return "cpu"
    if spec == "cpu":
        return "cpu"
    m = _DEVICE_RE.match(spec)
    if not m:
        raise DeviceError(f"malformed device '{spec}': use 'auto', 'cpu' or '<backend>:<index>' such as 'cuda:0'")
    backend, index = m.group("backend"), int(m.group("index") or 0)
    if backend == "gpu":
        raise DeviceError("'gpu' is ambiguous: name the backend, e.g. 'cuda:0' or 'cann:0'")
    present = [d for d in available if d.backend == backend]
    if not present:
        compiled = compiled_backends()
        if backend in compiled:
            raise DeviceError(
                f"this build has the {backend} backend but it reports no device "
                f"(driver missing, or hidden by *_VISIBLE_DEVICES?); available: {', '.join(backends())}"
            )
        raise BackendUnavailableError(
            f"device '{spec}' needs the {backend} backend, which this build does not have "
            f"(compiled backends: {', '.join(compiled)})",
            backend,
            build_recipe(backend),
        )
    for d in present:
        if d.index == index:
            if backend == "cann":
                apply_cann_environment()
            return d.id
    raise DeviceError(f"{backend} device {index} does not exist; this host has {', '.join(d.id for d in present)}")


def apply_cann_environment(environ: dict | None = None) -> dict[str, str]:
    """Sets the known-good CANN variables the user has not set; returns what was applied."""
    applied = set_unset(CANN_ENV_DEFAULTS, environ)
    if applied:
        log.warning(
            "CANN: applied %s (set them yourself to override)", ", ".join(f"{k}={v}" for k, v in applied.items())
        )
    return applied
