#!/usr/bin/env bash
# One call of the device tool: the model-level benchmark (bench --models) on
# whole Gemma3 models, with its default plan (1B, 4B, 27B and 12B, or the sizes
# in MODELS_SIZES; training for 1B and 4B) and time budget (330 s, or MODELS_BUDGET_S; what remains past
# it is skipped and says so). Should the timeout strike first, models.json still holds every
# size finished before it (render it with benchmarks/models_table.py).
# Outputs go to $OUT as one tarball (models.json, models.md, readme_table.md,
# models.png and the log; the tool brings back at most 8 files).
source "$(dirname "$0")/setup.sh"
"$PY" -c 'import transformers, liger_kernel; print("transformers", transformers.__version__, "liger_kernel ok")' 2>&1 | tail -1
budget=${MODELS_BUDGET_S:-330}
# shellcheck disable=SC2086  # MODELS_SIZES is a list of words
timeout $((budget + 150)) "$PY" -m geglu_triton bench --models ${MODELS_SIZES:-} --kernel-dir "$build" --out /tmp/models \
    --time-budget-s "$budget" > /tmp/models.log 2>&1
echo "bench --models exit code $?"
mkdir -p /tmp/models && cp /tmp/models.log /tmp/models/ && tar -C /tmp -cf "$OUT/models.tar" models
grep "^\[" /tmp/models.log | tail -40
tail -30 /tmp/models.log
