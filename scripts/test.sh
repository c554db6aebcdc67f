#!/usr/bin/env bash
# The test command: sets up the environment on a fresh machine, then runs the
# whole suite. Extra arguments go to pytest (for example: -m kernels_ci).
set -euo pipefail
source "$(dirname "$0")/env.sh"
# The tests write nothing into the source tree, Python's bytecode caches included.
export PYTHONDONTWRITEBYTECODE=1
exec "$PY" -m pytest -q -p no:cacheprovider "$@"
