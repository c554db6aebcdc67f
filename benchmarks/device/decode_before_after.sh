#!/usr/bin/env bash
# One call of the device tool: a change's effect on the host inside a whole model's decode. decode_probe.py's
# split stage for eager, ours and the build carried as .baseline-build/ (python -m geglu_triton build --out
# .baseline-build, from the revision to compare with), on the 1B (or DECODE_PROBE_SIZE), DECODE_PROBE_RUNS times
# (2 by default: a host-bound figure needs a repeat, PERFORMANCE v39), then its cold stage once, with the
# baseline build's MLP beside ours' (DECODE_PROBE_COLD=0 leaves it out). About 70 s a split run and 120 s for
# the cold stage on the H100's host. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
if [ ! -d .baseline-build ]; then
    echo "decode_before_after.sh: no .baseline-build here (build it and name it in the device tool's carry)" >&2
    exit 1
fi
size=${DECODE_PROBE_SIZE:-1b}
probe() {  # output name, then decode_probe.py's arguments
    local name=$1
    shift
    timeout 200 "$PY" benchmarks/decode_probe.py --kernel-dir "$build" --baseline-kernel-dir .baseline-build \
        --size "$size" --out "$OUT/$name.json" "$@" 2>&1 \
        | grep -v "kernel mapping\|WARNING\|dirty git tree\|^$" | tee "$OUT/$name.log" | tail -16
}
for run in $(seq "${DECODE_PROBE_RUNS:-2}"); do
    probe "decode_probe_${size}_before_after_run${run}" --stages split --arms eager ours "ours, baseline build"
done
if [ "${DECODE_PROBE_COLD:-1}" != 0 ]; then
    probe "decode_probe_${size}_before_after_cold" --stages cold --arms eager
fi
