#!/usr/bin/env bash
# Lint and formatting checks of the whole tree (the README's test command runs this):
# ruff for Python, clang-format (.clang-format) for native/. Both come with the test extra.
# With --fix, formats instead of checking.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t cpp < <(git ls-files 'native/*.cpp' 'native/*.h')
if [ "${1:-}" = "--fix" ]; then
  ruff check --fix . && ruff format . && clang-format -i "${cpp[@]}"
else
  ruff check . && ruff format --check . && clang-format --dry-run --Werror "${cpp[@]}"
fi
