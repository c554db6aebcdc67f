# Sourced by the device scripts beside it (each one call of the device tool,
# run from the repo root with $OUT set): the environment, the GPU's state,
# and the kernel built into $build.
set -uo pipefail
export PYTHONUNBUFFERED=1
source scripts/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
build=/tmp/fused-geglu-build
"$PY" -m geglu_triton build --out "$build" > /tmp/build.log 2>&1 || { tail /tmp/build.log; exit 1; }
