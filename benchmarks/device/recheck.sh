#!/usr/bin/env bash
# One call of the device tool: the GPU tests that failed in the last full run
# (benchmarks/results/2026-12-03-h200-suite), after their fixes, and the 1B
# model's decode part of bench --models. Outputs go to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/pytest.xml" tests/test_fallback.py \
    tests/test_hub_hostile.py tests/test_kernels_cli.py tests/test_publish.py::test_kernels_versions_lists_both \
    "tests/test_hub_server.py::test_get_kernel_and_versions_cli_from_a_trusted_org" 2>&1 | tail -12 | tee "$OUT/pytest.log"
timeout 100 "$PY" -m geglu_triton bench --models --models 1b --model-parts decode --kernel-dir "$build" \
    --out /tmp/decode > "$OUT/decode.log" 2>&1
cp /tmp/decode/models.json "$OUT/decode.json"; grep "^\[" "$OUT/decode.log" | tail -5
