"""What a Gemma3 training step keeps for its backward, by part of the model, for eager, ours and Liger.

Issue 15 asks for a training peak of at most 0.8x eager's. The peak comes
where the forward has finished: every tensor autograd saved is alive, plus the
loss's. An MLP kernel can only change the MLP's part of that. This script
counts, during one step, the tensors autograd saves by the module whose
forward saved them (a ``saved_tensors_hooks`` pack hook; each storage counted
once, parameters left out), in four parts: the layers' MLPs, their RMSNorms
(Gemma3's keep their input and their normalized output in float32; the q/k
norms too), the rest of their attention (projections' inputs, SDPA's own
tensors) and what is outside the layers (embedding, final norm, head and
loss, once per model). On a GPU it also measures the step's peak
(``max_memory_allocated`` less what was allocated before it, as ``bench
--models`` does): what the peak holds beyond the saved tensors is the loss's
and the backward's transients.

    python benchmarks/saved_activations.py --out saved.json [--sizes 1b 4b] [--layers N] [--tokens B S]
        [--kernel-dir build]

Without a GPU, use few layers and tokens (the per-layer, per-token figures do
not depend on either; SDPA's CPU kernel saves what the GPU's does only
roughly, so attention's part is the GPU's only on a GPU).
"""

from __future__ import annotations

import argparse
import gc
import json
from collections import Counter
from pathlib import Path

import torch

from geglu_triton.benchmarking import model_grid
from geglu_triton.benchmarking.environment import benchmark_device, device_name, load_kernel, utc_now, versions
from geglu_triton.benchmarking.implementations import EAGER, LIGER, OURS
from geglu_triton.benchmarking.model_implementations import ModelForwards
from geglu_triton.benchmarking.timing import peak_memory_of_call

PARTS = ("mlp", "norms", "attention", "outside the layers")
#: The parts each layer has (figures per layer and token).
LAYER_PARTS = PARTS[:3]


def _part(running: list[tuple[str, str]]) -> str:
    """The part of the model that saved a tensor, from the (name, class) of the modules whose forwards are running."""
    if not any(".layers." in name for name, _ in running):
        return "outside the layers"  # embedding, final norm, head and loss: once per model
    classes = [cls for _, cls in running]
    if any(cls.endswith("MLP") for cls in classes):
        return "mlp"
    if classes[-1].endswith("RMSNorm"):
        return "norms"
    return "attention"  # the attention module's own tensors: projections' inputs, q/k norms excepted, SDPA's


def saved_bytes_by_part(model: torch.nn.Module, step) -> tuple[dict[str, int], object]:
    """Bytes autograd saves during ``step()`` (a forward and its backward), by part; and what ``step`` returns.

    ``nn.Linear`` modules and the MLPs' ``act_fn`` get no hooks: a hooked
    projection is not a plain one, and a hooked activation runs the module's
    own forward, so the kernelized MLP would take another path
    (layers.is_plain_linear, layers.gelu_approximation).
    The step must run the backward: a pack hook that returns a saved output
    tensor itself makes a reference cycle that only the backward breaks.
    """
    running: list[tuple[str, str]] = []
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) or name.rsplit(".", 1)[-1] == "act_fn":
            continue
        entry = (name, type(module).__name__)
        handles.append(module.register_forward_pre_hook(lambda *_, entry=entry: running.append(entry)))
        handles.append(module.register_forward_hook(lambda *_: running.pop() and None, always_call=True))
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    counted: set[int] = set()  # storage addresses: a saved tensor's storage lives until the backward
    by_part: Counter = Counter()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address not in parameters and address not in counted:
            counted.add(address)
            by_part[_part(running)] += storage.nbytes()
        return tensor

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            result = step()
    finally:
        for handle in handles:
            handle.remove()
    return {part: by_part[part] for part in PARTS}, result


def measure(size: model_grid.Gemma3Size, layers: int, batch: int, sequence: int, device, kernel_dir: Path) -> dict:
    plan = model_grid.GPU_PLAN
    model = model_grid.build_model(size, layers, device, vocab=plan.training_vocab).train()
    forwards = ModelForwards(
        model, (EAGER, OURS, LIGER), kernel_dir=kernel_dir, approximate=model_grid.APPROXIMATE, device=device,
        training=True,
    )
    ids = torch.randint(plan.training_vocab, (batch, sequence), device=device)
    tokens = batch * sequence
    record: dict = {"layers": layers, "batch": batch, "sequence": sequence, "status": forwards.status}

    def training_step() -> None:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    for name in forwards.available:
        forwards.use(name)
        model.zero_grad(set_to_none=True)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        saved, (_, peak) = saved_bytes_by_part(model, lambda: peak_memory_of_call(device, training_step))
        per_layer_token = {part: saved[part] / layers / tokens for part in LAYER_PARTS}
        record[name] = {
            "saved_bytes": saved,
            "saved_bytes_per_layer_and_token": per_layer_token,
            "layer_bytes_per_token": sum(per_layer_token.values()),
            "peak_bytes_above_weights": peak,
        }
    model.zero_grad(set_to_none=True)
    eager_layer = record[EAGER]["layer_bytes_per_token"]
    for name in forwards.available:
        record[name]["layer_bytes_vs_eager"] = record[name]["layer_bytes_per_token"] / eager_layer
        if record[name]["peak_bytes_above_weights"] is not None:
            record[name]["peak_vs_eager"] = (
                record[name]["peak_bytes_above_weights"] / record[EAGER]["peak_bytes_above_weights"]
            )
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", nargs="+", default=["1b", "4b"], choices=sorted(model_grid.GEMMA3_SIZES))
    parser.add_argument("--layers", type=int, help="layers built (default: the checkpoint's on a GPU, 2 on a CPU)")
    parser.add_argument("--tokens", type=int, nargs=2, metavar=("BATCH", "SEQUENCE"),
                        help="default: bench --models' training shape on a GPU, 1 x 256 on a CPU")
    parser.add_argument("--kernel-dir", type=Path, help="a build of the kernel (default: built from this checkout)")
    args = parser.parse_args(argv)
    device = benchmark_device()
    plan = model_grid.GPU_PLAN
    on_gpu = device.type == "cuda"
    batch, sequence = args.tokens or ((plan.training_batch, plan.training_sequence) if on_gpu else (1, 256))
    results = {
        "date": utc_now().isoformat(timespec="seconds"),
        "versions": versions(),
        "device": device_name(device),
    }
    kernel = load_kernel(args.kernel_dir)
    try:
        for name in args.sizes:
            size = model_grid.GEMMA3_SIZES[name]
            layers = args.layers or (size.layers if on_gpu else 2)
            results[name] = measure(size, layers, batch, sequence, device, kernel.build_dir)
            for impl in (EAGER, OURS, LIGER):
                if impl in results[name]:
                    row = results[name][impl]
                    peak = row["peak_bytes_above_weights"]
                    parts = row["saved_bytes_per_layer_and_token"]
                    print(f"{name} {impl}: {row['layer_bytes_per_token']:,.0f} B per layer and token "
                          f"({row['layer_bytes_vs_eager']:.3f}x eager), by part {parts}"
                          + ("" if peak is None else f", peak {peak / 2**30:.2f} GiB ({row['peak_vs_eager']:.3f}x)"))
    finally:
        kernel.close()  # the temporary build, where it made one
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
