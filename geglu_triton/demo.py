"""The main job, end to end and offline: build, serve, publish, load, kernelize, compare.

1. start the local Hub on a free loopback port with a temporary data directory;
2. build the prebuilt variants (``build/torch-*``);
3. publish version 1 to ``org/fused-geglu``;
4. load it back with ``kernels.get_kernel("org/fused-geglu", version=1)``;
5. build a small Gemma3 text model from a config (random weights, nothing downloaded);
6. kernelize a copy of it with the fused GeGLUMLP layer;
7. check that both models' logits agree within the dtype's tolerance (on a
   GPU, also time both).

Exits non-zero if anything does not match. huggingface_hub reads HF_ENDPOINT
when it is imported, so this module imports it (and kernels) only after the
local Hub is up and the environment points at it.
"""

from __future__ import annotations

import argparse
import copy
import os
import secrets
import tempfile
from pathlib import Path

from . import REPO_ROOT
from .errors import UserError, directory_to_write
from .models import DEFAULT_REPO_ID

TRUSTED_ORG = DEFAULT_REPO_ID.split("/")[0]
#: Cache locations that override HF_HOME's: unset for the demo, whose downloads go to its scratch HF_HOME.
DEMO_OWNED_CACHES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE", "HF_ASSETS_CACHE", "KERNELS_CACHE")

#: ||kernelized - original|| / ||original|| allowed for the logits, per dtype name.
LOGITS_REL_TOL = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 5e-3}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build", type=directory_to_write, default=REPO_ROOT / "build", help="where to build the variants"
    )
    parser.add_argument(
        "--dtype", choices=sorted(LOGITS_REL_TOL), default=None, help="model dtype (default: bfloat16 on a GPU, float32 on the CPU)"
    )
    parser.add_argument("--allow-dirty", action="store_true", help="publish even if the checkout has uncommitted changes")


def _step(number: int, text: str) -> None:
    print(f"\n[{number}/7] {text}", flush=True)


def _small_gemma3(torch, device, dtype):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    on_gpu = device.type != "cpu"
    config = Gemma3TextConfig(
        vocab_size=2048 if on_gpu else 512,
        hidden_size=1024 if on_gpu else 128,
        intermediate_size=4096 if on_gpu else 344,
        num_hidden_layers=4 if on_gpu else 2,
        num_attention_heads=8 if on_gpu else 4,
        num_key_value_heads=2 if on_gpu else 1,
        head_dim=128 if on_gpu else 32,
        max_position_embeddings=1024,
        sliding_window=256 if on_gpu else 64,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).to(device=device, dtype=dtype).eval()
    return model, config


def _median_ms(torch, fn, repeats: int = 20) -> float:
    """Median of CUDA-event timings of fn(), after warm-up."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def run(args: argparse.Namespace) -> int:
    from .hub.background import LocalHub

    with tempfile.TemporaryDirectory(prefix="fused-geglu-demo-") as scratch:
        scratch = Path(scratch)
        token = "hf_demo_" + secrets.token_hex(8)
        _step(1, "starting the local Hub")
        with LocalHub(scratch / "hub-data", port=0, trusted_orgs=(TRUSTED_ORG,), token=token) as hub:
            print(f"  serving {hub.endpoint} (data in {hub.data_dir}, trusted org {TRUSTED_ORG!r})")
            # Point every Hub client of this process at the local server before any of
            # them is imported (the build reads build.toml through kernels, which
            # imports huggingface_hub).
            os.environ["HF_ENDPOINT"] = hub.endpoint
            os.environ["HF_TOKEN"] = token
            os.environ["HF_HOME"] = str(scratch / "hf-home")
            for cache in DEMO_OWNED_CACHES:  # each would take precedence over HF_HOME's: the user's own caches
                os.environ.pop(cache, None)
            os.environ.pop("HF_HUB_OFFLINE", None)
            os.environ.pop("HF_HUB_DISABLE_TELEMETRY", None)  # breaks kernels' requests (see README)

            from .build import build_variants

            _step(2, f"building the prebuilt variants into {args.build}")
            for variant in build_variants(args.build):
                print(f"  {variant}")
            return _publish_load_and_compare(args, args.build, hub.endpoint, token)


def _require_swapped_mlps(swap) -> None:
    """The demo compares a kernelized model with its original: refuse a kernelize that swapped nothing, which
    kernelize_geglu_mlps returns only where DISABLE_KERNEL_MAPPING is set (it raises where the model has no GeGLU
    MLP, and where it found some and swapped none)."""
    if not swap.swapped_modules:
        raise UserError("kernelize swapped no module: DISABLE_KERNEL_MAPPING is set; unset it to run the demo")


def _publish_load_and_compare(args, build_dir: Path, endpoint: str, token: str) -> int:
    import torch
    from huggingface_hub import HfApi
    from kernels import get_kernel

    from .benchmarking.environment import kernel_path
    from .models import NoGeGLUMLPError, kernelize_geglu_mlps
    from .publish import publish

    _step(3, f"publishing version 1 to {DEFAULT_REPO_ID}")
    api = HfApi(endpoint=endpoint, token=token)
    report = publish(build_dir, DEFAULT_REPO_ID, api=api, allow_dirty=args.allow_dirty)
    print(f"  {report}")

    _step(4, f'get_kernel("{DEFAULT_REPO_ID}", version=1)')
    kernel = get_kernel(DEFAULT_REPO_ID, version=1)
    print(f"  loaded {kernel.__name__} from {Path(kernel.__file__).parent}")
    print(f"  functions: {', '.join(name for name in kernel.__all__ if name != 'layers')}")

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    _step(5, f"building a small Gemma3 text model ({device.type}, {str(dtype).removeprefix('torch.')}, random weights)")
    original, config = _small_gemma3(torch, device, dtype)
    print(
        f"  hidden {config.hidden_size}, intermediate {config.intermediate_size}, "
        f"{config.num_hidden_layers} layers, activation {config.hidden_activation}"
    )
    print(f"  the kernel's MLPs will run {kernel_path(kernel, device)}")

    _step(6, "kernelizing a copy with GeGLUMLP from the Hub")
    kernelized = copy.deepcopy(original)
    try:
        swap = kernelize_geglu_mlps(kernelized, repo_id=DEFAULT_REPO_ID, version=1)
    except NoGeGLUMLPError as error:  # no GeGLU MLP recognised in the model this transformers builds
        raise UserError(f"the demo's model: {error}") from None
    print(f"  classes given the GeGLUMLP layer name: {', '.join(swap.classes) or 'none'}")
    for name in swap.swapped_modules:
        print(f"  swapped: {name}")
    _require_swapped_mlps(swap)

    _step(7, "comparing logits")
    torch.manual_seed(1)
    input_ids = torch.randint(0, config.vocab_size, (2, 64), device=device)
    with torch.no_grad():
        expected = original(input_ids).logits.float()
        got = kernelized(input_ids).logits.float()
    max_diff = (got - expected).abs().max().item()
    rel = ((got - expected).norm() / expected.norm()).item()
    tolerance = LOGITS_REL_TOL[str(dtype).removeprefix("torch.")]
    print(f"  largest |difference| {max_diff:.3g}; relative {rel:.3g} (tolerance {tolerance:g})")

    if device.type == "cuda":
        with torch.no_grad():
            original_ms = _median_ms(torch, lambda: original(input_ids))
            kernelized_ms = _median_ms(torch, lambda: kernelized(input_ids))
        print(f"  forward: original {original_ms:.3f} ms, kernelized {kernelized_ms:.3f} ms "
              f"({original_ms / kernelized_ms:.2f}x)")

    if not rel <= tolerance:
        raise UserError(
            f"the kernelized model's logits do not match the original's: relative difference {rel:.3g}, "
            f"tolerance {tolerance:g}"
        )
    print("\nOK: the kernelized model matches the original")
    return 0
