#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's second command; .ci/run calls it).
#   scripts/test.sh              setup + release build (CUDA compiled when nvcc exists) + all tests
#                                + the ASan/UBSan build of the unit tests (less the three placement tests
#                                that rerun every golden case per layer split / resident-layer count: the
#                                release pass runs them; under ASan they would add minutes, not coverage)
#   VV_SKIP_SANITIZE=1 scripts/test.sh   skips the sanitizer pass
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs" --no-tests=error

if [ "${VV_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake --preset sanitize >/dev/null
  cmake --build --preset sanitize -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --preset sanitize -j "$jobs" --no-tests=error
fi
