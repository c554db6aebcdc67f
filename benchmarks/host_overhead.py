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
a Python backward costs by itself); ours again with its launches skipped and
with the backward on the calling thread instead of autograd's CUDA worker
thread, to find where a backward's host time goes, with a cProfile of ours
(the calling thread's Python only). Last, the whole GeGLU MLP at decode and
prefill sizes, per call in a host loop and per CUDA-graph replay: if the two
agree, the GPU, not the host, sets the time.

Each host-loop figure is the wall time of N back-to-back calls divided by N,
with a synchronize only at the ends (best of 5 rounds).

    python benchmarks/host_overhead.py --kernel-dir build --out overhead.json
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import io
import json
import pstats
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from geglu_triton.benchmarking.environment import load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA3_27B, GEMMA_2B
from geglu_triton.benchmarking.host import triton_dispatch
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


class PythonBackwardReleasingTheGIL(PythonBackwardOnly):
    """The same, but its backward lets go of the GIL once (as a Triton launch does): what that costs there."""

    @staticmethod
    def backward(ctx, grad_out):
        time.sleep(0)
        return grad_out, grad_out


@contextlib.contextmanager
def launches_skipped(kernel, *names):
    """The named launch functions of triton_kernels replaced by ones that launch nothing."""
    tk = kernel.triton_kernels
    saved = {name: getattr(tk, name) for name in names}
    for name in names:
        setattr(tk, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(tk, name, fn)


def backward_on_calling_thread():
    """Autograd runs CUDA backwards on a worker thread of its own; this keeps them on the caller's."""
    return torch.autograd.set_multithreading_enabled(False)


def activation_cases(kernel, shape) -> dict:
    tk = kernel.triton_kernels
    g, u, grad = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(g)
    tensors = (g, u, out)
    n_cols = g.numel()
    scalars = (1, n_cols, n_cols, n_cols, n_cols)
    grid, options = tk.launch_plan(1, n_cols, n_cols, g.element_size(), "tanh", kernel.device_tables.describe_device(0).warp_size)
    compiled = tk.geglu_forward_kernel[grid](*tensors, *scalars, **options.as_kwargs())
    stream = torch.cuda.current_stream().cuda_stream
    gr, ur = g.clone().requires_grad_(), u.clone().requires_grad_()

    def forward_backward(fn):
        return lambda: torch.autograd.grad(fn(gr, ur), (gr, ur), grad)

    def eager_geglu(a, b):
        return F.gelu(a, approximate="tanh") * b

    none = contextlib.nullcontext
    cases = {  # name: (call, the setting it runs in)
        "eager": (lambda: eager_geglu(g, u), none),
        "public": (lambda: kernel.geglu(g, u), none),
        "public, Triton dispatch": (lambda: kernel.geglu(g, u), lambda: triton_dispatch(kernel)),
        "launcher": (lambda: tk.launch_forward(tensors, 1, n_cols, scalars[2:], "tanh"), none),
        "jit launch": (lambda: tk.geglu_forward_kernel[grid](*tensors, *scalars, **options.as_kwargs()), none),
        "compiled runner": (
            lambda: compiled[grid + (1, 1)](*tensors, *scalars, *options.constexpr_values, stream=stream),
            none,
        ),
        "fwd+bwd eager": (forward_backward(eager_geglu), none),
        "fwd+bwd ours": (forward_backward(kernel.geglu), none),
        "fwd+bwd eager forward, Python backward doing nothing": (forward_backward(PythonBackwardOnly.apply), none),
        "fwd+bwd ours, backward launches nothing": (
            forward_backward(kernel.geglu),
            lambda: launches_skipped(kernel, "launch_backward"),
        ),
        "fwd+bwd ours, no launches": (
            forward_backward(kernel.geglu),
            lambda: launches_skipped(kernel, "launch_forward", "launch_backward"),
        ),
        "fwd+bwd ours, Triton dispatch": (forward_backward(kernel.geglu), lambda: triton_dispatch(kernel)),
        "fwd+bwd Python backward releasing the GIL once": (forward_backward(PythonBackwardReleasingTheGIL.apply), none),
        "fwd+bwd eager, backward on the calling thread": (forward_backward(eager_geglu), backward_on_calling_thread),
        "fwd+bwd ours, backward on the calling thread": (forward_backward(kernel.geglu), backward_on_calling_thread),
        "fwd+bwd Python backward doing nothing, on the calling thread": (
            forward_backward(PythonBackwardOnly.apply),
            backward_on_calling_thread,
        ),
    }
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction

        cases["fwd+bwd Liger"] = (forward_backward(LigerGELUMulFunction.apply), none)
    except ImportError:
        pass
    return cases


def python_profile(fn, setting, calls: int = 2000, top: int = 25) -> str:
    """cProfile of ``calls`` calls of ``fn`` (the calling thread only): the top functions by own time."""
    with setting():
        for _ in range(50):
            fn()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def mlp_rows(kernel, model, tokens: int) -> dict:
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
        cases = activation_cases(kernel, shape)
        for name, (fn, setting) in cases.items():
            with setting():
                results[label][name] = per_call_us(fn)
        print(f"shape {shape}")
        for name, us in results[label].items():
            print(f"  {name:62s} {us:7.1f} us/call")
    profiles = {
        name: python_profile(*activation_cases(kernel, (1, 256))[name])
        for name in ("fwd+bwd ours, backward on the calling thread", "fwd+bwd ours")
    }
    for name, text in profiles.items():
        print(f"cProfile, {name}:\n{text}")
    mlp = {
        f"{model.name} x {tokens} tokens": mlp_rows(kernel, model, tokens)
        for model, tokens in ((GEMMA_2B, 1), (GEMMA_2B, 16), (GEMMA3_27B, 16), (GEMMA3_27B, 1024))
    }
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
                "python_profiles": profiles,
                "mlp_forward_us": mlp,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
