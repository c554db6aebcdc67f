# Sourced by the device scripts beside it (each one call of the device tool,
# run from the repo root with $OUT set): the environment, the GPU's state,
# and the kernel built into $build.
set -uo pipefail
export PYTHONUNBUFFERED=1
source scripts/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
# The device's copy holds this tree's files with a .git of the commit the session started from
# (PERFORMANCE v37): print what the build will be named after, and how many tracked files differ.
echo "git HEAD $(git rev-parse --short HEAD 2>/dev/null || echo none), $(git status --porcelain --untracked-files=no 2>/dev/null | wc -l) tracked files differ from it"
build=/tmp/fused-geglu-build
"$PY" -m geglu_triton build --out "$build" > /tmp/build.log 2>&1 || { tail /tmp/build.log; exit 1; }
