"""Correctness of the kernel's functions, loaded from the build output through ``kernels``.

On a GPU these run the compiled Triton kernels; on the CPU (CI) the same
kernels under TRITON_INTERPRET=1, so sizes stay small enough for the
interpreter.
"""

from __future__ import annotations

import pytest
import torch

from reference import (
    APPROXIMATIONS,
    BACKWARD_FP32_ULPS,
    BACKWARD_MAX_MISMATCH_FRACTION,
    BACKWARD_MAX_ULPS,
    ERROR_RATIO_TO_EAGER,
    DTYPES,
    FORWARD_REL_TOL,
    MAX_GELU_ULPS,
    MAX_PRODUCT_ULPS,
    ULP_CHECK_MAX_ABS_GATE,
    ULP_CHECK_MIN_ABS_GELU_SLOPE,
    assert_mostly_bit_identical,
    backward_term_scales,
    eager_geglu,
    geglu64,
    geglu64_grads,
    randn,
    rel_error,
    ulps_apart,
)

# Odd, tiny, wide (past Liger's 65,536-column limit) and multi-dimensional shapes.
SHAPES = [(1,), (3, 1), (5, 7), (2, 3, 4231), (2, 70000)]


@pytest.fixture(scope="module")
def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _max_ulps_where_well_conditioned(ours, eager, gate, gelu_slope_of=None) -> int:
    """The most ulps between ours and eager's where the result is well conditioned in gate: off the GELU's
    tails and, for a result that is proportional to gelu'(gate) (``gelu_slope_of`` its approximate), off its zero."""
    well_conditioned = gate.abs() <= ULP_CHECK_MAX_ABS_GATE
    if gelu_slope_of is not None:
        ones = torch.ones_like(gate)
        gelu_slope = geglu64_grads(gate, ones, ones, gelu_slope_of)[0]
        well_conditioned &= gelu_slope.abs() >= ULP_CHECK_MIN_ABS_GELU_SLOPE
    return torch.where(well_conditioned, ulps_apart(ours, eager), 0).max().item()


def _assert_forward_matches(out, gate, up, approximate):
    assert out.shape == gate.shape and out.dtype == gate.dtype and out.device == gate.device
    exact, eager = geglu64(gate, up, approximate), eager_geglu(gate, up, approximate)
    err, eager_err = rel_error(out, exact), rel_error(eager, exact)
    # A tensor of one or two elements deep in a tail is as ill-conditioned for
    # eager as for us (1 + erf cancels): there, eager's own error sets the bar.
    bound = max(FORWARD_REL_TOL[gate.dtype], ERROR_RATIO_TO_EAGER * eager_err)
    assert err <= bound, f"relative error {err:.3g} vs float64 (eager's {eager_err:.3g})"
    if gate.dtype != torch.float32:
        assert_mostly_bit_identical(out, eager)
        assert _max_ulps_where_well_conditioned(out, eager, gate) <= MAX_PRODUCT_ULPS


def _assert_backward_matches(grads, gate, up, grad_out, approximate):
    """Each gradient's error vs float64: at most ERROR_RATIO_TO_EAGER x eager autograd's, plus a few fp32 ulps."""
    gate_e = gate.detach().clone().requires_grad_()
    up_e = up.detach().clone().requires_grad_()
    eager_geglu(gate_e, up_e, approximate).backward(grad_out)
    eager_grads = (gate_e.grad, up_e.grad)
    exact_grads = geglu64_grads(gate, up, grad_out, approximate)
    scales = backward_term_scales(gate, up, grad_out)
    for name, ours, eager, exact, scale in zip(("gate", "up"), grads, eager_grads, exact_grads, scales):
        assert ours.shape == exact.shape and ours.dtype == gate.dtype
        ours_err, eager_err = rel_error(ours, exact), rel_error(eager, exact)
        floor = BACKWARD_FP32_ULPS * torch.finfo(torch.float32).eps * scale.norm().item() / max(exact.norm().item(), 1e-300)
        bound = ERROR_RATIO_TO_EAGER * eager_err + floor
        assert ours_err <= bound, f"grad_{name}: error {ours_err:.3g}, eager's {eager_err:.3g}"


@pytest.mark.kernels_ci
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_geglu_forward_and_backward(kernel, device, shape, dtype, approximate):
    gate = randn(*shape, dtype=dtype, device=device).requires_grad_()
    up = randn(*shape, dtype=dtype, device=device).requires_grad_()
    out = kernel.geglu(gate, up, approximate=approximate)
    _assert_forward_matches(out.detach(), gate.detach(), up.detach(), approximate)

    grad_out = randn(*shape, dtype=dtype, device=device)
    out.backward(grad_out)
    _assert_backward_matches((gate.grad, up.grad), gate, up, grad_out, approximate)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 2), (3, 5, 2 * 4231), (2, 2 * 70000)], ids=str)
def test_geglu_concat_forward_and_backward(kernel, device, shape, dtype, approximate):
    x = randn(*shape, dtype=dtype, device=device).requires_grad_()
    half = shape[-1] // 2
    out = kernel.geglu_concat(x, approximate=approximate)
    gate, up = x.detach()[..., :half], x.detach()[..., half:]
    _assert_forward_matches(out.detach(), gate, up, approximate)

    grad_out = randn(*out.shape, dtype=dtype, device=device)
    out.backward(grad_out)
    assert x.grad.shape == x.shape
    _assert_backward_matches((x.grad[..., :half], x.grad[..., half:]), gate, up, grad_out, approximate)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gelu_rounding_point_is_within_one_ulp_of_eager(kernel, device, dtype, approximate):
    """With up = 1 the output is the rounded GELU itself: eager's, to within one ulp."""
    gate = randn(16, 4096, dtype=dtype, device=device)
    ours = kernel.geglu(gate, torch.ones_like(gate), approximate=approximate)
    eager = torch.nn.functional.gelu(gate, approximate=approximate)
    assert_mostly_bit_identical(ours, eager)
    assert _max_ulps_where_well_conditioned(ours, eager, gate) <= MAX_GELU_ULPS


@pytest.mark.kernels_ci
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_backward_rounds_like_eager_autograd(kernel, device, dtype, approximate):
    """Both bf16/fp16 gradients are eager autograd's, to within a few ulps in rare elements."""
    gate, up, grad_out = (randn(8, 4096, dtype=dtype, device=device) for _ in range(3))
    ours = kernel.ops.geglu_backward(grad_out, gate, up, approximate)
    gate_e, up_e = gate.clone().requires_grad_(), up.clone().requires_grad_()
    eager_geglu(gate_e, up_e, approximate).backward(grad_out)
    for name, mine, eager in zip(("gate", "up"), ours, (gate_e.grad, up_e.grad)):
        mismatch = (mine != eager).float().mean().item()
        assert mismatch <= BACKWARD_MAX_MISMATCH_FRACTION, f"grad_{name}: {mismatch:.2%} of elements differ from eager"
        gelu_slope_of = approximate if name == "gate" else None
        assert _max_ulps_where_well_conditioned(mine, eager, gate, gelu_slope_of) <= BACKWARD_MAX_ULPS, f"grad_{name}"


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's exp(-2z) -> inf: sigmoid 0
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tails_against_float64(kernel, device, dtype, approximate):
    """Inputs out to |x| ~ 25: the saturated tails, both gradients included."""
    gate = randn(8, 1000, dtype=dtype, device=device, scale=6.0).requires_grad_()
    up = randn(8, 1000, dtype=dtype, device=device).requires_grad_()
    out = kernel.geglu(gate, up, approximate=approximate)
    assert rel_error(out, geglu64(gate, up, approximate)) <= FORWARD_REL_TOL[dtype]
    grad_out = randn(8, 1000, dtype=dtype, device=device)
    out.backward(grad_out)
    _assert_backward_matches((gate.grad, up.grad), gate, up, grad_out, approximate)


def test_default_is_tanh(kernel, device):
    gate, up = randn(4, 33, device=device), randn(4, 33, device=device)
    assert torch.equal(kernel.geglu(gate, up), kernel.geglu(gate, up, approximate="tanh"))
    x = torch.cat([gate, up], dim=-1)
    # The same strided halves both ways: PyTorch's CPU GELU (the fallback's) rounds a contiguous tensor
    # and a strided view of the same values differently.
    assert torch.equal(kernel.geglu_concat(x), kernel.geglu(x[..., :33], x[..., 33:], approximate="tanh"))


@pytest.mark.parametrize("shape", [(0,), (0, 16), (4, 0), (2, 0, 3)], ids=str)
def test_empty_tensors(kernel, device, shape):
    gate = torch.empty(shape, device=device, requires_grad=True)
    up = torch.empty(shape, device=device, requires_grad=True)
    out = kernel.geglu(gate, up)
    assert out.shape == gate.shape
    out.sum().backward()
    assert gate.grad.shape == shape and up.grad.shape == shape


@pytest.mark.parametrize("gate_value", [None, -2.245], ids=["random", "erf-tail"])
def test_scalar_tensors(kernel, device, gate_value):
    """A 0-d gate and up. At gate -2.245 (a random draw that failed on the H200) 1 + erf cancels, and a
    single element's fp32 error is eager's too: the bar is eager's error, as for every forward."""
    gate = randn(device=device) if gate_value is None else torch.tensor(gate_value, device=device)
    up = randn(device=device)
    out = kernel.geglu(gate, up, approximate="none")
    assert out.shape == ()
    _assert_forward_matches(out, gate, up, "none")


@pytest.mark.kernels_ci
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gate_up_halves_are_read_in_place(kernel, device, dtype):
    """The two halves of a gate_up projection output: row stride 2n, unit column stride."""
    gate_up = randn(3, 7, 2 * 300, dtype=dtype, device=device)
    gate, up = gate_up.chunk(2, dim=-1)
    assert not gate.is_contiguous()
    _assert_forward_matches(kernel.geglu(gate, up), gate, up, "tanh")


@pytest.mark.parametrize(
    "make_view",
    [
        lambda t: t.transpose(0, 1),  # last dimension not contiguous
        lambda t: t[::2],  # every other row
        lambda t: t[:, ::3],  # column stride 3
        lambda t: t.transpose(0, 1)[:, 1:],  # no single row stride at all
        lambda t: t.expand(4, *t.shape)[:, 0],  # stride-0 leading dimension
    ],
    ids=["transposed", "row-step", "col-step", "transposed-sliced", "expanded"],
)
def test_other_layouts_are_correct(kernel, device, make_view):
    gate = make_view(randn(24, 40, device=device)).requires_grad_()
    up = make_view(randn(24, 40, device=device))
    out = kernel.geglu(gate, up, approximate="none")
    _assert_forward_matches(out.detach(), gate.detach(), up, "none")
    grad_out = make_view(randn(24, 40, device=device))
    out.backward(grad_out)
    exact_gate, _ = geglu64_grads(gate, up, grad_out, "none")
    assert rel_error(gate.grad, exact_gate) <= 1e-6


def test_backward_twice_with_retained_graph(kernel, device):
    """Gradients go to new tensors, so a retained graph gives the same gradients again."""
    gate = randn(6, 50, device=device, dtype=torch.bfloat16).requires_grad_()
    up = randn(6, 50, device=device, dtype=torch.bfloat16).requires_grad_()
    saved_gate, saved_up = gate.detach().clone(), up.detach().clone()
    out = kernel.geglu(gate, up)
    grad_out = randn(6, 50, device=device, dtype=torch.bfloat16)
    first = torch.autograd.grad(out, (gate, up), grad_out, retain_graph=True)
    second = torch.autograd.grad(out, (gate, up), grad_out)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert torch.equal(gate, saved_gate) and torch.equal(up, saved_up), "inputs were overwritten"


def test_aliased_inputs(kernel, device):
    """geglu(x, x): both gradients accumulate into x.grad correctly."""
    x = randn(5, 64, device=device).requires_grad_()
    out = kernel.geglu(x, x, approximate="none")
    grad_out = randn(5, 64, device=device)
    out.backward(grad_out)
    x64 = x.detach().double().requires_grad_()
    geglu64(x64, x64, "none").backward(grad_out.double())
    assert rel_error(out, geglu64(x, x, "none")) <= 1e-6
    assert rel_error(x.grad, x64.grad) <= 1e-6


@pytest.mark.parametrize("name, approximate", [("gelu_and_mul", "none"), ("gelu_tanh_and_mul", "tanh")])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activation_drop_ins(kernel, device, name, approximate, dtype):
    """Same argument order as kernels-community/activation: (out, x); writes and returns out."""
    x = randn(3, 4, 2 * 129, dtype=dtype, device=device)
    out = torch.full((3, 4, 129), float("nan"), dtype=dtype, device=device)
    returned = getattr(kernel, name)(out, x)
    assert returned is out
    _assert_forward_matches(out, x[..., :129], x[..., 129:], approximate)


def test_activation_drop_in_into_strided_out(kernel, device):
    x = randn(6, 2 * 40, device=device)
    buffer = torch.full((40, 6), float("nan"), device=device)
    out = buffer.t()  # last dimension not contiguous
    kernel.gelu_and_mul(out, x)
    assert rel_error(buffer.t(), geglu64(x[:, :40], x[:, 40:], "none")) <= 1e-6


@pytest.mark.parametrize("cls_name, approximate", [("GeluAndMul", "none"), ("GeluTanhAndMul", "tanh")])
def test_activation_layers(kernel, device, cls_name, approximate):
    layer = getattr(kernel.layers, cls_name)()
    x = randn(2, 3, 2 * 50, device=device).requires_grad_()
    out = layer(x)
    _assert_forward_matches(out.detach(), x.detach()[..., :50], x.detach()[..., 50:], approximate)
    grad_out = randn(2, 3, 50, device=device)
    out.backward(grad_out)
    assert x.grad.shape == x.shape
    _assert_backward_matches((x.grad[..., :50], x.grad[..., 50:]), x[..., :50], x[..., 50:], grad_out, approximate)


def test_64bit_offsets_decision(kernel):
    """(n_rows, n_cols, row stride): 64-bit offsets once one past the last element's offset reaches 2^31."""
    needs_int64 = kernel.triton_kernels.needs_int64_offsets
    assert not needs_int64((4, 8, 8), (4, 8, 16))
    assert needs_int64((4, 8, 8), (2, 8, 2**31))  # the second row starts at element 2^31
    assert needs_int64((1, 2**31, 2**31))  # one row of 2^31 elements
    assert not needs_int64((1, 2**31 - 1, 2**31 - 1))


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
def test_64bit_offset_kernels_compute_the_same(kernel, device, approximate):
    """The int64-offset specialization of both kernels, forced on a small problem."""
    tk = kernel.triton_kernels
    if device == "cpu" and not tk.RUNS_INTERPRETED:
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    gate, up, grad_out = (randn(3, 37, device=device) for _ in range(3))
    out, grad_gate, grad_up = (torch.empty(3, 37, device=device) for _ in range(3))
    grid, options = tk.launch_plan(3, 37, 37, 4, approximate, warp_size=32)
    common = {**options.as_kwargs(), "INT64_OFFSETS": True}
    tk.geglu_forward_kernel[grid](gate, up, out, 3, 37, 37, 37, 37, **common)
    out_again = torch.empty_like(out)
    tk.geglu_backward_kernel[grid](
        grad_out, gate, up, grad_gate, grad_up, out_again, 3, 37, *(37,) * 6, **common, STORE_OUTPUT=True
    )
    assert rel_error(out, geglu64(gate, up, approximate)) <= 1e-6
    assert torch.equal(out_again, out)
    for ours, exact in zip((grad_gate, grad_up), geglu64_grads(gate, up, grad_out, approximate)):
        assert rel_error(ours, exact) <= 1e-6


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU for 2^31+ elements")
def test_more_than_2_31_elements(kernel):
    n_rows, n_cols = 2**16 + 3, 2**15 + 1  # 2,147,581,955 elements
    gate = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    up = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    out = kernel.geglu(gate, up)
    for rows in (slice(0, 4), slice(n_rows - 4, n_rows)):
        assert torch.equal(out[rows], eager_geglu(gate[rows], up[rows], "tanh"))
    del out
    grad_gate, grad_up = kernel.ops.geglu_backward(up, gate, up, "tanh")
    tail = slice(n_rows - 2, n_rows)
    exact_gate, exact_up = geglu64_grads(gate[tail], up[tail], up[tail], "tanh")
    assert rel_error(grad_gate[tail], exact_gate) <= FORWARD_REL_TOL[torch.bfloat16]
    assert rel_error(grad_up[tail], exact_up) <= FORWARD_REL_TOL[torch.bfloat16]
