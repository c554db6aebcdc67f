"""Where the host time of one small GeGLU call goes, layer by layer.

At decode sizes the GPU work is a few microseconds, so the CPU side of a call
(Python, the dispatcher, Triton's launcher) is what the user waits for. This
times, on one tiny input, each layer of our call stack and eager's two ops:

    eager            F.gelu(g) * u                      two aten ops
    public           kernel.geglu(g, u)                 what users call
    custom_op        kernel.ops.geglu(g, u, "tanh")     the registered op
    autograd.Function  the same implementation behind torch.autograd.Function
    impl             ops._forward_into(g, u, out)       views + launch, no dispatch
    launcher         triton_kernels.launch_forward      config + Triton launch
    (with grad)      the public call and the Function on inputs that require grad

Each figure is the host wall time of N back-to-back calls divided by N, with a
synchronize only at the ends (the GPU work overlaps and is far shorter).

    python benchmarks/host_overhead.py --kernel-dir build --out overhead.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

CALLS = 3000


def per_call_us(fn, calls: int = CALLS) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from kernels import get_local_kernel

    kernel = get_local_kernel(args.kernel_dir)
    ops, tk = kernel.ops, kernel.triton_kernels

    class GeGLUFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, gate, up):
            out = gate.new_empty(gate.shape)
            ops._forward_into(gate, up, out, "tanh")
            ctx.save_for_backward(gate, up)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            gate, up = ctx.saved_tensors
            grad_gate, grad_up = gate.new_empty(gate.shape), up.new_empty(up.shape)
            ops._backward_into(grad_out, gate, up, grad_gate, grad_up, "tanh")
            return grad_gate, grad_up

    results = {}
    for shape in [(1, 256), (16, 9216)]:
        g = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        u = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(g)
        g2, u2, o2 = (t.view(1, -1) for t in (g, u, out))
        gr, ur = g.clone().requires_grad_(), u.clone().requires_grad_()
        compiled = torch.compile(lambda a, b: F.gelu(a, approximate="tanh") * b)
        cases = {
            "eager": lambda: F.gelu(g, approximate="tanh") * u,
            "torch.compile": lambda: compiled(g, u),
            "public": lambda: kernel.geglu(g, u),
            "custom_op": lambda: ops.geglu(g, u, "tanh"),
            "autograd.Function": lambda: GeGLUFunction.apply(g, u),
            "impl": lambda: ops._forward_into(g, u, out, "tanh"),
            "launcher": lambda: tk.launch_forward(g2, u2, o2, "tanh"),
            "eager, requires_grad": lambda: F.gelu(gr, approximate="tanh") * ur,
            "public, requires_grad": lambda: kernel.geglu(gr, ur),
            "autograd.Function, requires_grad": lambda: GeGLUFunction.apply(gr, ur),
        }
        row = {name: per_call_us(fn) for name, fn in cases.items()}
        results["x".join(map(str, shape))] = row
        print(f"shape {shape}")
        for name, us in row.items():
            print(f"  {name:34s} {us:7.1f} us/call")
    args.out.write_text(
        json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "per_call_us": results}, indent=1)
    )


if __name__ == "__main__":
    main()
