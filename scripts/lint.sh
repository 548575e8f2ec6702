#!/usr/bin/env bash
# Lint and formatting checks of the whole tree (the README's test command runs this):
# ruff for Python, clang-format (.clang-format) for native/, lizard for function length.
# All three come with the test extra. With --fix, formats instead of checking.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t cpp < <(git ls-files 'native/*.cpp' 'native/*.h')

# Function length: a Python function in llama_omni_py/ may span at most 80 lines, a C++ function
# in native/ at most 100. lizard's "length" is the function's full extent, first line to last
# (comments and blank lines included), unlike its NLOC. The complexity and parameter thresholds
# are set out of reach so that only length is checked. Each offender is printed as
# "file:line: warning: NAME has ... N length"; lizard exits non-zero when there is any.
function_length() {
  local status=0
  lizard --languages python --length 80 -C 1000000 --arguments 1000 --warnings_only llama_omni_py || status=1
  lizard --languages cpp --length 100 -C 1000000 --arguments 1000 --warnings_only native || status=1
  if [ "$status" -ne 0 ]; then
    echo "lint: functions above are too long (Python over 80 lines, C++ over 100): split them" >&2
  fi
  return "$status"
}

if [ "${1:-}" = "--fix" ]; then
  ruff check --fix . && ruff format . && clang-format -i "${cpp[@]}"
else
  ruff check . && ruff format --check . && clang-format --dry-run --Werror "${cpp[@]}" && function_length
fi
