"""Fixtures of the tests that drive the compiled core's pieces directly."""

import pytest

from llama_omni_py._native import core


@pytest.fixture(params=core.internal.cpu_isas(), ids=lambda name: f"isa-{name}")
def cpu_isa(request):
    """Each CPU kernel set this CPU runs (docs/cpu-kernels.md), forced for the test; the set in use
    before (the best, or what OMNI_CPU_ISA chose) comes back afterwards."""
    before = core.internal.cpu_isa()
    core.internal.force_cpu_isa(request.param)
    try:
        yield request.param
    finally:
        core.internal.force_cpu_isa(before)
