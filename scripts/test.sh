#!/usr/bin/env bash
# The test command: sets up the environment, then runs the whole suite.
# Extra arguments go to pytest (for example: -m kernels_ci).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/env.sh)
# On a machine without a GPU the Triton kernels run under Triton's interpreter.
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    export TRITON_INTERPRET=1
fi
exec "$PY" -m pytest -q -p no:cacheprovider "$@"
