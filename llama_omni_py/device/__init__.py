"""Where the engines run: the ggml backends and devices of this build (backends: device strings,
``auto``, the build recipe of a missing backend, CANN's environment defaults) and the CPU
placement of a session's threads (placement: the NUMA node, the vocoder pool's CPUs and the
stage threads').

May import the base layer and ``_native`` (the core loads when a device is first asked about,
not when this is imported); nothing above.
"""
