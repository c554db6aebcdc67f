"""The cold-start child process: first-call latency with empty Triton and Inductor caches.

Run by ``host.cold_start`` with ``TRITON_CACHE_DIR`` and ``TORCHINDUCTOR_CACHE_DIR``
pointing at fresh directories. The device is initialized first, so that what
is timed is the first call itself: from the call to its synchronized result
(compilation included), for ours (forward, then its first backward) and then
for ``torch.compile`` of eager's function. Prints one JSON line.

    python -m geglu_triton.benchmarking.coldstart --kernel-dir build --tokens 1024 --intermediate 16384
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

_START = time.perf_counter()

import torch  # noqa: E402  (timed: the import is part of a cold start)


def _timed(fn, device) -> float:
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--intermediate", type=int, required=True)
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--approximate", default="tanh")
    args = parser.parse_args()
    torch_import_s = time.perf_counter() - _START

    from kernels import get_local_kernel

    from .environment import benchmark_device
    from .grid import DTYPES
    from .implementations import compile_backend, eager_activation

    device = benchmark_device()
    dtype = DTYPES[args.dtype]
    report = {"device": device.type, "torch_import_s": torch_import_s}
    report["device_init_s"] = _timed(lambda: torch.ones(1, device=device).add_(1), device)

    kernel = None

    def load() -> None:
        nonlocal kernel
        kernel = get_local_kernel(Path(args.kernel_dir))

    report["kernel_load_s"] = _timed(load, device)
    shape = (args.tokens, args.intermediate)
    gate = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    up = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    grad_out = torch.randn(shape, device=device, dtype=dtype)
    approximate = args.approximate

    def ours():
        return kernel.geglu(gate, up, approximate=approximate)

    report["ours_first_forward_s"] = _timed(ours, device)
    report["ours_second_forward_s"] = _timed(ours, device)
    report["ours_first_backward_s"] = _timed(lambda: torch.autograd.grad(ours(), (gate, up), grad_out), device)

    compiled = torch.compile(eager_activation(approximate), dynamic=False, backend=compile_backend(device))
    gate_nograd, up_nograd = gate.detach(), up.detach()
    report["compile_backend"] = compile_backend(device)
    report["compile_first_forward_s"] = _timed(lambda: compiled(gate_nograd, up_nograd), device)
    report["compile_second_forward_s"] = _timed(lambda: compiled(gate_nograd, up_nograd), device)
    report.update(tokens=args.tokens, intermediate=args.intermediate, dtype=args.dtype, approximate=approximate)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
