#!/usr/bin/env bash
# The main job: sets up the environment, then runs the end-to-end demo
# (build, local Hub, publish, get_kernel, kernelize a Gemma3 model).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/env.sh)
exec "$PY" -m geglu_triton demo "$@"
