#!/usr/bin/env bash
# The main job: sets up the environment on a fresh machine, then runs the
# end-to-end demo (build, local Hub, publish, get_kernel, kernelize a Gemma3
# model). Extra arguments go to the demo (see: python -m geglu_triton demo -h).
set -euo pipefail
source "$(dirname "$0")/env.sh"
exec "$PY" -m geglu_triton demo "$@"
