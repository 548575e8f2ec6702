"""Makes the compiled core unimportable in this process, as on a machine without the native build:
``import no_core`` before anything of the package (tests/unit/test_without_the_core.py runs the
unit/ folder and the gateway this way)."""

import sys

BLOCKED = "llama_omni_py._core"


class _NoCore:
    def find_spec(self, name, path=None, target=None):
        if name == BLOCKED:
            raise ImportError(f"{BLOCKED} is not built here")
        return None


if not any(isinstance(f, _NoCore) for f in sys.meta_path):
    sys.meta_path.insert(0, _NoCore())
