#!/usr/bin/env bash
# One call of the device tool: the model-level benchmark (bench --models) on
# whole Gemma3 models, with its default plan (1B, 4B, 12B and 27B; training
# for 1B and 4B) and time budget, which fit in about seven minutes on an
# H200. Outputs go to $OUT as one tarball (models.json, models.md,
# readme_table.md, models.png and the log; the tool brings back at most 8 files).
source "$(dirname "$0")/setup.sh"
"$PY" -c 'import transformers, liger_kernel; print("transformers", transformers.__version__, "liger_kernel ok")' 2>&1 | tail -1
timeout 540 "$PY" -m geglu_triton bench --models --kernel-dir "$build" --out /tmp/models > /tmp/models.log 2>&1
echo "bench --models exit code $?"
mkdir -p /tmp/models && cp /tmp/models.log /tmp/models/ && tar -C /tmp -cf "$OUT/models.tar" models
grep "^\[" /tmp/models.log | tail -40
tail -30 /tmp/models.log
