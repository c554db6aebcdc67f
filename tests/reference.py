"""Float64 references, input factories and tolerances shared by the kernel tests.

One source of truth: every test compares against these functions with these
tolerances, so a change of policy happens in one place. The float64 GELU and
the forward's tolerance are the benchmark's own (``geglu_triton.benchmarking.accuracy``).
"""

from __future__ import annotations

import torch

from geglu_triton.benchmarking.accuracy import FORWARD_REL_TOL, gelu64  # noqa: F401 - FORWARD_REL_TOL: for the tests

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
APPROXIMATIONS = ("tanh", "none")
#: Eager bf16/fp16 forward: at most this fraction of elements not bit-identical
#: (measured on the CPU, interpreter against eager: up to 5.6e-4, fp16 exact
#: GELU, where erf implementations differ in the last fp32 bit), and at least
#: this many allowed, so that a tensor of a few thousand elements is not
#: failed by the rate itself ...
MAX_MISMATCH_FRACTION = 1e-3
MIN_MISMATCHES_ALLOWED = 8


def assert_mostly_bit_identical(ours: torch.Tensor, eager: torch.Tensor) -> None:
    mismatches = (ours != eager).sum().item()
    allowed = max(MIN_MISMATCHES_ALLOWED, MAX_MISMATCH_FRACTION * ours.numel())
    assert mismatches <= allowed, f"{mismatches} of {ours.numel()} elements differ from eager (allowed {allowed:g})"


#: ... with the GELU result (the first rounding point) never more than one ulp
#: from eager's ...
MAX_GELU_ULPS = 1
#: ... so the product, re-rounded, never more than two (a one-ulp GELU
#: difference times an ``up`` just under a power of two).
MAX_PRODUCT_ULPS = 2
#: The backward rounds where eager autograd rounds, so its bf16/fp16 gradients are
#: eager's too, but where the fp32 gelu' differs from ATen's gelu_backward in the
#: last bits (tanh, erf implementations): measured on the CPU, interpreter against
#: eager, at most 1.3e-3 of the elements (fp16, exact GELU) and by at most 3 ulps
#: where well conditioned (a one-ulp GELU in grad_up's product gives 2).
BACKWARD_MAX_MISMATCH_FRACTION = 2e-3
BACKWARD_MAX_ULPS = 3
#: The ulp bounds hold where eager's own expression is well conditioned. Past
#: |gate| ~ 3, 1 + erf(x / sqrt(2)) (or 1 + tanh(z)) cancels: one fp32 ulp of
#: erf / tanh, where implementations may differ (CPU's vectorized erf against
#: the interpreter's or CUDA's), is then several fp16 ulps of a result close to
#: zero. Those tails are checked against float64 instead.
ULP_CHECK_MAX_ABS_GATE = 3.0
#: gelu' crosses zero at gate ~ -0.752, where grad_gate = grad_out * up *
#: gelu'(gate) is the difference of two nearly equal terms (Phi(x) + x phi(x)):
#: one fp32 ulp of either is several fp16 ulps of the small result (seen: 4 ulps
#: at gate = -0.75195 in about 4% of random 8 x 4096 fp16 tensors). grad_gate's
#: ulp bound leaves out the gates whose |gelu'| is below this (some ten fp16 values).
ULP_CHECK_MIN_ABS_GELU_SLOPE = 1e-3
#: Where eager itself is far from float64 (its backward always; a tiny tail
#: tensor forward), our error may be at most this multiple of eager's error ...
ERROR_RATIO_TO_EAGER = 2.0
#: ... plus, for the backward, this many fp32 ulps of the magnitude of the
#: terms each gradient is computed from (a mixed error bound): our backward
#: computes gelu' in fp32, and where gelu' cancels (gate near -0.75) or
#: gelu does (far negative gate), a few ulps of the terms are a large
#: relative error of a small result, which on a tensor of one or two elements
#: eager may by luck avoid. Worst seen over 2e5 random elements: 2.8 ulps.
BACKWARD_FP32_ULPS = 8


def backward_term_scales(gate, up, grad_out):
    """Magnitudes of the terms behind (grad_gate, grad_up), in float64.

    grad_gate = grad_out * up * gelu'(gate), gelu' a sum of terms of size up to
    1 + |gate|; grad_up = grad_out * gelu(gate), |gelu(gate)| <= |gate|.
    """
    gate, up, grad_out = gate.detach().double(), up.detach().double(), grad_out.double()
    return (grad_out * up).abs() * (1 + gate.abs()), (grad_out * gate).abs()


def geglu64(gate: torch.Tensor, up: torch.Tensor, approximate: str) -> torch.Tensor:
    return gelu64(gate, approximate) * up.double()


def geglu64_grads(gate, up, grad_out, approximate):
    """(grad_gate, grad_up) of sum(grad_out * geglu(gate, up)) in float64, by autograd."""
    gate64 = gate.detach().double().requires_grad_()
    up64 = up.detach().double().requires_grad_()
    geglu64(gate64, up64, approximate).backward(grad_out.double())
    return gate64.grad, up64.grad


def eager_geglu(gate, up, approximate):
    return torch.nn.functional.gelu(gate, approximate=approximate) * up


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double(), expected.double()
    assert not torch.isnan(actual).any(), "NaN in the result"
    denom = expected.norm().item()
    return (actual - expected).norm().item() / (denom if denom > 0 else 1.0)


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place between two same-dtype float tensors (finite values)."""
    assert a.dtype == b.dtype and a.dtype in (torch.float16, torch.bfloat16)
    ia = a.contiguous().view(torch.int16).int()
    ib = b.contiguous().view(torch.int16).int()
    # Map sign-magnitude bit patterns onto a monotonic integer line.
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return (ia - ib).abs()


def randn(*shape, dtype=torch.float32, device="cpu", scale=1.0) -> torch.Tensor:
    """Fresh random data (never zeros), by default of unit scale, as pre-activations are.

    The far tails (|x| > 5) are where eager's own CPU and CUDA paths disagree
    with each other (CPU's vectorized tanh saturates to -1 early), so the
    comparisons with eager use unit scale and test_geglu.py checks the tails
    against float64 separately, with a large scale.
    """
    return (torch.randn(shape, dtype=torch.float32, device=device) * scale).to(dtype)


def linear_inputs(tokens_shape, hidden, intermediate, *, dtype, device="cpu", bias=False):
    """x, gate_weight, up_weight, gate_bias, up_bias of a GeGLU MLP's first half.

    Weights scaled by 1/sqrt(hidden), as initialized layers are, so that the
    projections (the GELU's inputs) are of unit scale.
    """
    scale = max(hidden, 1) ** -0.5
    x = randn(*tokens_shape, hidden, dtype=dtype, device=device)
    gate_weight = randn(intermediate, hidden, dtype=dtype, device=device, scale=scale)
    up_weight = randn(intermediate, hidden, dtype=dtype, device=device, scale=scale)
    gate_bias = randn(intermediate, dtype=dtype, device=device) if bias else None
    up_bias = randn(intermediate, dtype=dtype, device=device) if bias else None
    return x, gate_weight, up_weight, gate_bias, up_bias


def _linear(x, weight, bias):
    return torch.nn.functional.linear(x, weight, bias)


def geglu_linear64(x, gate_weight, up_weight, gate_bias, up_bias, approximate):
    """gelu(x W_gate^T + b_gate) * (x W_up^T + b_up) in float64."""
    def as64(t):
        return None if t is None else t.double()

    gate = _linear(x.double(), gate_weight.double(), as64(gate_bias))
    return geglu64(gate, _linear(x.double(), up_weight.double(), as64(up_bias)), approximate)


def eager_geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate):
    """What eager PyTorch computes: two GEMMs in the storage dtype, then F.gelu and the product."""
    return eager_geglu(_linear(x, gate_weight, gate_bias), _linear(x, up_weight, up_bias), approximate)


#: Liger-Kernel's tolerance for its GeGLU MLP's bf16 gradients against eager's
#: (test/transformers/test_geglu.py), which ours must meet too.
LIGER_GRAD_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}
#: An MLP's gradients, which round where eager's round: no further from
#: float64 than eager's (plus a few fp32 ulps: the GEMMs' order of accumulation).
MLP_GRAD_ERROR_RATIO_TO_EAGER = 1.01


def compile_fullgraph(fn, device):
    """``torch.compile(fn, fullgraph=True)`` after a Dynamo reset: Inductor on a GPU, aot_eager on the CPU
    (the tests trace through the ops there; Inductor's CPU code generation needs a C++ toolchain)."""
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="aot_eager" if str(device) == "cpu" else "inductor")
