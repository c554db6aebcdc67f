# Sourced by scripts/test.sh and scripts/demo.sh: sets up the Python
# environment for fused-geglu on a fresh machine and sets PY to the interpreter.
#
# - Where python3 already has a CUDA (or ROCm) build of torch, as on a GPU box,
#   that interpreter is used as it is: only missing packages are installed, and
#   the toolkit (geglu_triton) is put on PYTHONPATH.
# - Otherwise a virtual environment .venv gets the CPU build of torch
#   (torch==2.13.0+cpu), requirements-dev.txt and the toolkit in editable mode.
#   pip runs only when the .venv differs from those pins
#   (scripts/pins_satisfied.py reads them from the files), so a re-run is fast.
# On a machine without a GPU, TRITON_INTERPRET=1 is exported so that the real
# Triton kernels run, interpreted, on CPU tensors.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "[env] $*" >&2; }

TORCH_PIN=2.13.0+cpu
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

if python3 -c 'import sys, torch; sys.exit(0 if (torch.version.cuda or torch.version.hip) else 1)' 2>/dev/null; then
    PY=python3
    log "using the GPU build of torch in $(command -v python3)"
    if [ -d .whl ]; then
        # An offline GPU box: packages it lacks travel as wheels in .whl/.
        site="${TMPDIR:-/tmp}/fused-geglu-site"
        log "installing the wheels in .whl/ into $site"
        python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" .whl/*.whl >&2
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    else
        missing=$(python3 - <<'PY'
import importlib.util
for mod, pkg in [("kernels", "kernels==0.17.2"), ("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("pytest", "pytest"),
                 ("hypothesis", "hypothesis==6.170.15")]:
    if importlib.util.find_spec(mod) is None:
        print(pkg)
PY
)
        if [ -n "$missing" ]; then
            log "installing: $missing"
            python3 -m pip install -q $missing >&2
        fi
    fi
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        export TRITON_INTERPRET=1  # a GPU build of torch, but no GPU
    fi
else
    if [ ! -x .venv/bin/python ]; then
        log "creating .venv"
        python3 -m venv .venv
    fi
    PY=.venv/bin/python
    # pip runs only when something differs from the pins (a re-run costs a second, not a minute).
    if reason=$("$PY" scripts/pins_satisfied.py requirements-dev.txt "$TORCH_PIN" "$PWD"); then
        log ".venv already matches the pins (torch==$TORCH_PIN, requirements-dev.txt, geglu-triton editable)"
    else
        log "installing into .venv: $reason"
        if [ "$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)" != "$TORCH_PIN" ]; then
            # The CPU build by its local version: from pip's configured sources (find-links, an index
            # carrying it), else from PyTorch's CPU index.
            log "installing torch==$TORCH_PIN (the CPU build)"
            "$PY" -m pip install -q "torch==$TORCH_PIN" >&2 ||
                "$PY" -m pip install -q "torch==$TORCH_PIN" --extra-index-url "$TORCH_CPU_INDEX" >&2
        fi
        "$PY" -m pip install -q -r requirements-dev.txt >&2
        "$PY" -m pip install -q --no-deps -e . >&2
    fi
    export TRITON_INTERPRET=1  # torch's CPU build sees no GPU (known without importing torch: seconds)
fi
