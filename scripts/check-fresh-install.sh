#!/usr/bin/env bash
# Clones the current commit into a temporary directory, installs it into a new virtual
# environment and runs the tests, timing each step: the "fresh machine" check of the README.
#   scripts/check-fresh-install.sh [--cold]
# --cold also empties pip's wheel cache and ccache for the run (measures a first install).
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ "${1:-}" == "--cold" ]]; then
  export PIP_CACHE_DIR="$work/pip-cache" CCACHE_DIR="$work/ccache"
fi
git clone -q "$repo" "$work/src"
python3 -m venv "$work/venv"
cd "$work/src"
t0=$(date +%s)
"$work/venv/bin/pip" install -q ".[test]"
t1=$(date +%s)
touch native/src/gguf_file.cpp
"$work/venv/bin/pip" install -q --no-build-isolation --no-deps .
t2=$(date +%s)
(cd "$work/src" && "$work/venv/bin/pytest" tests -q)
t3=$(date +%s)
echo "install: $((t1 - t0)) s; rebuild after touching one .cpp: $((t2 - t1)) s; tests: $((t3 - t2)) s"
