"""Where the host time of one GeGLU call goes, layer by layer, and what autograd adds.

At decode sizes the GPU work is a few microseconds, so the CPU side of a call
(Python, the dispatcher, Triton's launcher) is what the user waits for. On
one tiny input this times each layer of our call stack against eager:

    eager                    F.gelu(g) * u                          two aten ops
    public                   kernel.geglu(g, u)                     what users call (direct launch)
    public, Triton dispatch  the same, every launch through kernel[grid]
    launcher                 triton_kernels.launch_forward          config + direct launch
    jit launch               geglu_forward_kernel[grid](...)        Triton's dispatch alone
    compiled runner          compiled[grid](...)                    the direct launch alone

and forward+backward (``torch.autograd.grad``) for eager, ours, Liger (when
installed) and an autograd.Function whose backward does no GPU work (what
a Python backward costs by itself). Last, the whole GeGLU MLP at a prefill
size, per call in a host loop and per CUDA-graph replay: if the two agree,
the GPU, not the host, sets the time.

Each host-loop figure is the wall time of N back-to-back calls divided by N,
with a synchronize only at the ends (best of 5 rounds).

    python benchmarks/host_overhead.py --kernel-dir build --out overhead.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from geglu_triton.benchmarking.environment import load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA3_27B
from geglu_triton.benchmarking.modules import GemmaStyleMLP

CALLS = 2000


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


def graph_replay_us(fn, replays: int = 20) -> float:
    """Per-call time of ``fn`` captured once in a CUDA graph and replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


class PythonBackwardOnly(torch.autograd.Function):
    """eager forward, a Python backward that launches nothing: autograd's cost of a Python backward."""

    @staticmethod
    def forward(ctx, gate, up):
        return F.gelu(gate, approximate="tanh") * up

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, grad_out


class TritonDispatchOnly:
    """Calls ``fn`` with the kernel's launchers going through ``kernel[grid]`` every time."""

    def __init__(self, kernel, fn) -> None:
        self.launchers = (kernel.triton_kernels._launch_forward_kernel, kernel.triton_kernels._launch_backward_kernel)
        self.fn = fn

    def __enter__(self):
        self.saved = [launcher.direct for launcher in self.launchers]
        for launcher in self.launchers:
            launcher.direct = False

    def __exit__(self, *exc):
        for launcher, direct in zip(self.launchers, self.saved):
            launcher.direct = direct

    def __call__(self):
        return self.fn()


def activation_cases(kernel, shape) -> dict:
    tk = kernel.triton_kernels
    g, u, grad = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(g)
    tensors = (g, u, out)
    n_cols = g.numel()
    scalars = (1, n_cols, n_cols, n_cols, n_cols)
    grid, options = tk.launch_plan(1, n_cols, n_cols, g.element_size(), "tanh")
    compiled = tk.geglu_forward_kernel[grid](*tensors, *scalars, **options.as_kwargs())
    stream = torch.cuda.current_stream().cuda_stream
    gr, ur = g.clone().requires_grad_(), u.clone().requires_grad_()

    def forward_backward(fn):
        return lambda: torch.autograd.grad(fn(gr, ur), (gr, ur), grad)

    cases = {
        "eager": lambda: F.gelu(g, approximate="tanh") * u,
        "public": lambda: kernel.geglu(g, u),
        "public, Triton dispatch": TritonDispatchOnly(kernel, lambda: kernel.geglu(g, u)),
        "launcher": lambda: tk.launch_forward(tensors, 1, n_cols, scalars[2:], "tanh"),
        "jit launch": lambda: tk.geglu_forward_kernel[grid](*tensors, *scalars, **options.as_kwargs()),
        "compiled runner": lambda: compiled[grid + (1, 1)](*tensors, *scalars, *options.constexpr_values, stream=stream),
        "fwd+bwd eager": forward_backward(lambda a, b: F.gelu(a, approximate="tanh") * b),
        "fwd+bwd ours": forward_backward(kernel.geglu),
        "fwd+bwd eager forward, Python backward doing nothing": forward_backward(PythonBackwardOnly.apply),
    }
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction

        cases["fwd+bwd Liger"] = forward_backward(LigerGELUMulFunction.apply)
    except ImportError:
        pass
    return cases


def mlp_rows(kernel, tokens: int) -> dict:
    model = GEMMA3_27B
    module = GemmaStyleMLP(model.hidden, model.intermediate, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(tokens, model.hidden, device="cuda", dtype=torch.bfloat16)
    ours = types.MethodType(kernel.layers.GeGLUMLP.forward, module)
    rows = {}
    with torch.no_grad():
        for name, fn in (("eager", lambda: module(x)), ("ours", lambda: ours(x))):
            rows[name] = {"host_loop_us": per_call_us(fn, calls=200), "graph_replay_us": graph_replay_us(fn)}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    kernel = load_kernel(args.kernel_dir).module

    results = {}
    for shape in [(1, 256), (16, 9216)]:
        label = "x".join(map(str, shape))
        results[label] = {}
        for name, fn in activation_cases(kernel, shape).items():
            with fn if isinstance(fn, TritonDispatchOnly) else contextlib.nullcontext():
                results[label][name] = per_call_us(fn)
        print(f"shape {shape}")
        for name, us in results[label].items():
            print(f"  {name:52s} {us:7.1f} us/call")
    mlp = {f"{GEMMA3_27B.name} x {tokens} tokens": mlp_rows(kernel, tokens) for tokens in (16, 1024)}
    for cell, rows in mlp.items():
        for name, row in rows.items():
            print(f"MLP {cell} {name:6s} host loop {row['host_loop_us']:8.1f} us, graph replay {row['graph_replay_us']:8.1f} us")
    args.out.write_text(
        json.dumps(
            {
                "gpu": torch.cuda.get_device_name(),
                "versions": versions(),
                "date": utc_now().isoformat(timespec="seconds"),
                "dtype": "bf16",
                "per_call_us": results,
                "mlp_forward_us": mlp,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
