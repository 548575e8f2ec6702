#!/usr/bin/env bash
# Fills .carry/ (ignored by git) with what scripts/gpu-check.sh needs on a machine that reaches
# no package registry: the pinned llama-cpp-python source distribution, trimmed to what its
# build reads, and wheels (CPython 3.12, manylinux x86-64) of the Python packages this project
# needs beyond the GPU machine's image (numpy, psutil, pytest, scikit-build-core, pybind11, cmake
# and ninja are there).
#
#   scripts/gpu-carry.sh [DEST]     (default DEST: .carry in the repository root)
#
# The trimmed sdist is rebuilt from the sha256-checked original (vendor/llama.cpp.pin): its
# llama.cpp tree without models/ (tokenizer test vocabularies), docs/, media/, tests, examples,
# benchmarks, Python conversion tools, git metadata, and tools/ other than mtmd (none of which
# the library build reads), so that the tree and it stay small enough to copy to the GPU machine
# (under 64 MiB together).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${1:-$ROOT/.carry}
PY=${PYTHON:-python3}
pin() { sed -n "s/^$1 = //p" "$ROOT/vendor/llama.cpp.pin"; }
VERSION=$(pin version)
SHA256=$(pin sdist_sha256)

# Wheels for the GPU machine (Python 3.12, x86-64): what the package, the benchmark's JSON
# Schema check and the tests import there. Versions pinned for a reproducible carry.
WHEELS=(
  scipy-openblas32==0.3.34.481.3   # the vocoder's sgemm (build and run time)
  soundfile==0.14.0 cffi==2.0.0 pycparser==3.0
  websockets==17.4 ffmpeg-python==0.2.0 future==1.0.0
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0
)

mkdir -p "$DEST/sdist" "$DEST/wheels"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "== llama-cpp-python $VERSION source distribution"
SDIST=llama_cpp_python-$VERSION.tar.gz
if [ ! -f "$DEST/sdist/$SDIST" ]; then
  # --no-build-isolation: pip reads the sdist's metadata with the local scikit-build-core
  # instead of downloading its build requirements
  "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python --no-build-isolation \
    "llama-cpp-python==$VERSION" -d "$TMP/dl"
  echo "$SHA256  $TMP/dl/$SDIST" | sha256sum -c -
  mkdir "$TMP/x"
  tar xzf "$TMP/dl/$SDIST" -C "$TMP/x"
  src=$TMP/x/llama_cpp_python-$VERSION
  lc=$src/vendor/llama.cpp
  rm -rf "$src"/{.git,.github,docs,docker,examples,tests} \
    "$lc"/{.git,.github,.devops,models,docs,media,benches,tests,examples,pocs,gguf-py,conversion,app,skills,ci}
  find "$lc/tools" -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} +
  tar czf "$DEST/sdist/$SDIST" -C "$TMP/x" "llama_cpp_python-$VERSION"
  {
    echo "llama-cpp-python $VERSION sdist, trimmed by scripts/gpu-carry.sh"
    echo "original sha256 $SHA256 (vendor/llama.cpp.pin)"
    echo "trimmed sha256 $(sha256sum "$DEST/sdist/$SDIST" | cut -d' ' -f1)"
  } > "$DEST/sdist/TRIMMED.txt"
fi
cat "$DEST/sdist/TRIMMED.txt"

echo "== wheels for CPython 3.12 manylinux x86-64"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST/wheels" "${WHEELS[@]}"
ls -1 "$DEST/wheels"

echo "== carried size"
du -sh "$DEST"
total=$(du -sk "$DEST" | cut -f1)
if [ "$total" -gt $((48 * 1024)) ]; then
  echo "gpu-carry: $DEST is over 48 MiB; with the tree it must stay under 64 MiB" >&2
  exit 1
fi
