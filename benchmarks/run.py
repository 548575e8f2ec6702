"""The benchmark suite from a checkout: the same as ``llama-omni bench`` (llama_omni_py/bench/).

python benchmarks/run.py [--model-dir DIR] [--t2w-threads 1,2] [--tts-queue 1,16] [--out-dir DIR]
"""

import sys

from llama_omni_py.bench.arguments import main

if __name__ == "__main__":
    sys.exit(main())
