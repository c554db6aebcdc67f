"""A kernel that Triton cannot compile for the device: the call runs unfused, warns once, and never raises.

Triton's compiler is replaced by one that raises ``OutOfResources`` (what an
~100 KB-shared-memory GPU raised for the H200's decode configuration) for the
fused GEMM alone, then for every kernel.
"""

from __future__ import annotations

import types
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from triton.runtime.errors import OutOfResources

from reference import assert_mostly_bit_identical, rel_error


class OutOfSharedMemory:
    """Stands in for a ``@triton.jit`` kernel whose every compilation fails for lack of shared memory.

    It has the replaced kernel's parameters, which the launcher reads before its first launch.
    """

    __name__ = "kernel_too_large_for_this_device"

    def __init__(self, replaced) -> None:
        self.params = getattr(replaced, "params", None)  # None under the interpreter, which never reads it
        self.compilations = 0

    def __getitem__(self, grid):
        def compile_and_launch(*args, **options):
            self.compilations += 1
            raise OutOfResources(147_456, 101_376, "shared memory")

        return compile_and_launch


@pytest.fixture(scope="module")
def device(kernel):
    if torch.cuda.is_available():
        return "cuda"
    if not kernel.triton_kernels.RUNS_INTERPRETED:
        pytest.skip("no Triton kernel runs here (needs a GPU or TRITON_INTERPRET=1)")
    return "cpu"


def _compilers_fail(kernel, monkeypatch, launcher_names) -> list[OutOfSharedMemory]:
    """The named launchers' kernels replaced by ones that fail to compile; the once-per-process warning re-armed.

    Each launcher forgets what it compiled before (on a GPU, earlier tests leave binaries in its cache).
    """
    monkeypatch.setattr(kernel.ops, "_warned_of_fallback", False)
    failing = []
    for module, name in launcher_names:
        launcher = getattr(module, name)
        failing.append(OutOfSharedMemory(launcher.kernel))
        monkeypatch.setattr(launcher, "kernel", failing[-1])
        monkeypatch.setattr(launcher, "_unavailable", {})
        monkeypatch.setattr(launcher, "_compiled", {})
        monkeypatch.setattr(launcher, "_launches", {})
    return failing


def _fallback_warnings(caught) -> list:
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "fused-geglu" in str(w.message)]


class GemmaStyleMLP(nn.Module):
    def __init__(self, hidden, intermediate, dtype, device):
        super().__init__()
        self.gate_proj, self.up_proj = (nn.Linear(hidden, intermediate, bias=False, dtype=dtype, device=device) for _ in "gu")
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype, device=device)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_fused_gemm_that_does_not_compile_falls_back_to_two_gemms(kernel, device, monkeypatch):
    (gemm,) = _compilers_fail(kernel, monkeypatch, [(kernel.triton_gemm_kernels, "_launch_mlp_gemm_kernel")])
    torch.manual_seed(0)
    module = GemmaStyleMLP(48, 80, torch.bfloat16, device)
    ours = types.MethodType(kernel.layers.GeGLUMLP.forward, module)
    x = torch.randn(2, 3, 48, dtype=torch.bfloat16, device=device)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            hidden = kernel.geglu_linear(x, module.gate_proj.weight, module.up_proj.weight)
            out, out_one_token = ours(x), ours(x[:1, :1])  # one token: the down projection's own form too
    assert len(_fallback_warnings(caught)) == 1
    assert "OutOfResources" in str(_fallback_warnings(caught)[0].message)
    assert gemm.compilations == 2  # its gated form and its plain one, each tried once, not again on each call
    with torch.no_grad():
        eager_hidden = F.gelu(module.gate_proj(x), approximate="tanh") * module.up_proj(x)
        eager_out = module(x)
    # The unfused path is eager's: two GEMMs, then the GeGLU with eager's rounding points.
    assert_mostly_bit_identical(hidden, eager_hidden)
    assert rel_error(out, eager_out) <= 1e-2
    assert rel_error(out_one_token, eager_out[:1, :1]) <= 1e-2


def test_no_kernel_compiles_pytorch_runs_everything(kernel, device, monkeypatch):
    """The fused GEMM and both activation kernels fail: forward and backward run in PyTorch, one warning."""
    names = ["_launch_forward_kernel", "_launch_backward_kernel"]
    failing = _compilers_fail(
        kernel,
        monkeypatch,
        [(kernel.triton_gemm_kernels, "_launch_mlp_gemm_kernel")] + [(kernel.triton_kernels, n) for n in names],
    )
    torch.manual_seed(0)
    module = GemmaStyleMLP(32, 64, torch.bfloat16, device)
    ours = types.MethodType(kernel.layers.GeGLUMLP.forward, module)
    x = torch.randn(5, 32, dtype=torch.bfloat16, device=device, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            inference, inference_one_token = ours(x), ours(x[:1])
        out = ours(x)
        (grad_x,) = torch.autograd.grad(out.square().sum(), x)
    assert len(_fallback_warnings(caught)) == 1
    # Each variant tried once, on its first call: the GEMM's gated and plain forms, the forward's tiles of
    # 5 and 1 tokens, the backward's one.
    assert [k.compilations for k in failing] == [2, 2, 1]
    eager_out = module(x)
    (eager_grad_x,) = torch.autograd.grad(eager_out.square().sum(), x)
    # PyTorch's forward is eager's own expression; its backward rounds once, where eager rounds thrice.
    assert_mostly_bit_identical(inference, eager_out)
    assert_mostly_bit_identical(inference_one_token, eager_out[:1])
    assert_mostly_bit_identical(out, eager_out)
    assert rel_error(grad_x, eager_grad_x) <= 1e-2
