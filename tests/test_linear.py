"""geglu_linear: the gate and up projections and the GeGLU in one Triton GEMM (inference), else two GEMMs.

On the CPU the fused kernel runs under TRITON_INTERPRET=1 at every token
count (the launch table's classes are all exercised through explicit
configs); on a GPU it runs where the launch table says it pays off.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn as nn

from reference import (
    APPROXIMATIONS,
    ERROR_RATIO_TO_EAGER,
    FORWARD_REL_TOL,
    compile_fullgraph,
    eager_geglu_linear,
    geglu_linear64,
    linear_inputs,
    randn,
    rel_error,
)


@pytest.fixture(scope="module")
def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def fused_launches(kernel, monkeypatch):
    """The fused GEMM launches made while the test runs (each a token count)."""
    gemm = kernel.triton_gemm_kernels
    launches = []
    launch = gemm.launch_geglu_linear

    def counting_launch(x, *args, **kwargs):
        launches.append(math.prod(x.shape[:-1]))
        return launch(x, *args, **kwargs)

    monkeypatch.setattr(gemm, "launch_geglu_linear", counting_launch)
    return launches


def _assert_matches_eager_error(out, operands, approximate):
    """Error against float64 within the dtype's tolerance, or within twice eager's own error."""
    exact = geglu_linear64(*operands, approximate)
    eager = eager_geglu_linear(*operands, approximate)
    assert out.shape == eager.shape and out.dtype == eager.dtype and out.device == eager.device
    err, eager_err = rel_error(out, exact), rel_error(eager, exact)
    bound = max(FORWARD_REL_TOL[out.dtype], ERROR_RATIO_TO_EAGER * eager_err)
    assert err <= bound, f"relative error {err:.3g} vs float64 (eager's {eager_err:.3g})"


LINEAR_SHAPES = [((1,), 32, 96), ((5,), 40, 33), ((2, 9), 300, 70)]  # (tokens shape, hidden, intermediate)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("tokens_shape, hidden, intermediate", LINEAR_SHAPES, ids=str)
def test_geglu_linear_matches_eager(kernel, device, tokens_shape, hidden, intermediate, dtype, bias, approximate):
    operands = linear_inputs(tokens_shape, hidden, intermediate, dtype=dtype, device=device, bias=bias)
    with torch.no_grad():
        out = kernel.geglu_linear(*operands, approximate=approximate)
    _assert_matches_eager_error(out, operands, approximate)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_every_launch_table_config_is_correct(kernel, device, dtype):
    """Each class's tiles, of every device's table, on a problem that none of its block sizes divides (tails)."""
    gemm = kernel.triton_gemm_kernels
    for config in {config for _, table in kernel.device_tables.GEMM_TABLES for _, config in table}:
        tokens = config.block_m + 3
        operands = linear_inputs((tokens,), config.block_k + 40, config.block_n + 5, dtype=dtype, device=device, bias=True)
        x, gate_weight, up_weight, gate_bias, up_bias = operands
        out = torch.full((tokens, gate_weight.shape[0]), float("nan"), dtype=dtype, device=device)
        gemm.launch_geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, out, "tanh", config)
        _assert_matches_eager_error(out, operands, "tanh")


@pytest.mark.parametrize(
    "make_bias",
    [lambda b: torch.stack([b, -b], dim=1)[:, 0], lambda b: b[:1].expand(b.shape[0]), lambda b: b.flip(0).flip(0)],
    ids=["stride-2", "stride-0", "contiguous"],
)
def test_biases_of_any_stride(kernel, device, fused_launches, make_bias):
    """The fused GEMM reads a bias as a unit-stride vector: other strides must give eager's result too."""
    operands = list(linear_inputs((5,), 32, 24, dtype=torch.bfloat16, device=device, bias=True))
    operands[3], operands[4] = make_bias(operands[3]), make_bias(operands[4])
    with torch.no_grad():
        out = kernel.geglu_linear(*operands)
    _assert_matches_eager_error(out, operands, "tanh")
    assert fused_launches == ([5] if kernel.triton_gemm_kernels.fused_pays_off(5) else [])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_inference_runs_the_fused_kernel(kernel, device, fused_launches, dtype):
    operands = linear_inputs((3,), 48, 40, dtype=dtype, device=device)
    with torch.no_grad():
        kernel.geglu_linear(*operands)
    expected = [3] if kernel.triton_gemm_kernels.fused_pays_off(3) else []
    assert fused_launches == expected


def test_gradients_take_the_differentiable_path(kernel, device, fused_launches):
    """With a gradient to compute: two GEMMs and the autograd activation; gradients within bf16 tolerance."""
    operands = linear_inputs((4,), 24, 20, dtype=torch.bfloat16, device=device, bias=True)
    ours, eager = ([t.clone().requires_grad_() for t in operands] for _ in range(2))
    grad_out = randn(4, 20, dtype=torch.bfloat16, device=device)
    kernel.geglu_linear(*ours, approximate="none").backward(grad_out)
    eager_geglu_linear(*eager, "none").backward(grad_out)
    exact = [t.detach().double().requires_grad_() for t in operands]
    geglu_linear64(*exact, "none").backward(grad_out.double())
    assert fused_launches == []
    for name, mine, theirs, truth in zip(("x", "gate_weight", "up_weight", "gate_bias", "up_bias"), ours, eager, exact):
        ours_err, eager_err = rel_error(mine.grad, truth.grad), rel_error(theirs.grad, truth.grad)
        bound = max(FORWARD_REL_TOL[torch.bfloat16], ERROR_RATIO_TO_EAGER * eager_err)
        assert ours_err <= bound, f"grad of {name}: {ours_err:.3g}, eager's {eager_err:.3g}"


def test_fp32_takes_two_gemms(kernel, device, fused_launches):
    operands = linear_inputs((2,), 16, 12, dtype=torch.float32, device=device)
    with torch.no_grad():
        out = kernel.geglu_linear(*operands)
    assert fused_launches == []
    _assert_matches_eager_error(out, operands, "tanh")


@pytest.mark.kernels_ci
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_fused_gate_up_weight_halves_are_read_in_place(kernel, device, bias):
    x, gate_weight, up_weight, gate_bias, up_bias = linear_inputs(
        (5,), 32, 24, dtype=torch.bfloat16, device=device, bias=bias
    )
    gate_up_weight = torch.cat([gate_weight, up_weight])
    gate_up_bias = torch.cat([gate_bias, up_bias]) if bias else None
    with torch.no_grad():
        fused = kernel.geglu_linear_concat(x, gate_up_weight, gate_up_bias, approximate="none")
        separate = kernel.geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate="none")
    assert torch.equal(fused, separate)


def test_empty_inputs(kernel, device):
    for tokens_shape, hidden, intermediate in [((0,), 8, 6), ((3,), 8, 0), ((2,), 0, 6)]:
        operands = linear_inputs(tokens_shape, hidden, intermediate, dtype=torch.bfloat16, device=device, bias=True)
        with torch.no_grad():
            out = kernel.geglu_linear(*operands)
        assert out.shape == (*tokens_shape, intermediate)
        assert torch.equal(out.float(), eager_geglu_linear(*operands, "tanh").float())


def _linear_args(x_shape=(3, 8), weight_shape=(6, 8), dtype=torch.float32, **changes):
    args = {
        "x": randn(*x_shape, dtype=dtype),
        "gate_weight": randn(*weight_shape, dtype=dtype),
        "up_weight": randn(*weight_shape, dtype=dtype),
        "gate_bias": None,
        "up_bias": None,
    }
    args.update(changes)
    return args


BAD_LINEAR_INPUTS = [
    (lambda: _linear_args(x=randn()), ValueError, "x must have at least one dimension"),
    (lambda: _linear_args(gate_weight=randn(6, 7)), ValueError, "gate_weight must be [intermediate, 8]"),
    (lambda: _linear_args(gate_weight=randn(6)), ValueError, "gate_weight must be [intermediate, 8]"),
    (lambda: _linear_args(up_weight=randn(5, 8)), ValueError, "up_weight must have gate_weight's shape (6, 8)"),
    (lambda: _linear_args(up_weight=randn(6, 8).half()), TypeError, "up_weight must have x's dtype"),
    (lambda: _linear_args(gate_bias=randn(5)), ValueError, "gate_bias must have shape (6,)"),
    (lambda: _linear_args(up_bias=randn(6, device="meta")), ValueError, "up_bias must be on x's device"),
    (lambda: _linear_args(up_bias=[0.0] * 6), TypeError, "up_bias must be a torch.Tensor"),
    (lambda: _linear_args(x=torch.ones(3, 8, dtype=torch.int64)), TypeError, "x has dtype torch.int64"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("make_args, error, message", BAD_LINEAR_INPUTS, ids=[b[-1] for b in BAD_LINEAR_INPUTS])
def test_bad_linear_inputs_get_clear_errors(kernel, make_args, error, message):
    with pytest.raises(error, match=re.escape(message)):
        kernel.geglu_linear(**make_args())


@pytest.mark.parametrize(
    "weight, bias, message",
    [
        (randn(7, 8), None, "gate_up_weight must be 2-D [2 * intermediate, hidden]"),
        (randn(6, 8), randn(3), "gate_up_bias must have shape (6,)"),
    ],
    ids=["odd-rows", "bias-shape"],
)
def test_bad_fused_gate_up_inputs_get_clear_errors(kernel, weight, bias, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        kernel.geglu_linear_concat(randn(2, 8), weight, bias)


@pytest.mark.kernels_ci
def test_opcheck_geglu_linear(kernel, device):
    for dtype in (torch.bfloat16, torch.float32):
        operands = linear_inputs((3,), 16, 20, dtype=dtype, device=device, bias=True)
        torch.library.opcheck(kernel.ops.geglu_linear, (*operands, "tanh"))


def test_torch_compile_inference_has_no_graph_break(kernel, device):
    mlp = nn.ModuleDict(
        {"gate": nn.Linear(16, 24, bias=False), "up": nn.Linear(16, 24, bias=False), "down": nn.Linear(24, 16)}
    ).to(device=device, dtype=torch.bfloat16)

    def forward(x):
        return mlp["down"](kernel.geglu_linear(x, mlp["gate"].weight, mlp["up"].weight))

    compiled = compile_fullgraph(forward, device)
    x = randn(2, 5, 16, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        assert rel_error(compiled(x), forward(x)) <= 1e-2
        assert torch._dynamo.explain(forward)(x).graph_break_count == 0


class _ScaledLinear(nn.Linear):
    """A Linear subclass whose call is not F.linear(x, weight, bias): its weight must not be read directly."""

    def forward(self, x):
        return 2 * super().forward(x)


class _GemmaStyleMLP(nn.Module):
    def __init__(self, hidden=16, intermediate=24, linear=nn.Linear):
        super().__init__()
        self.gate_proj = linear(hidden, intermediate, bias=False)
        self.up_proj = linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _kernel_forward(kernel, module, x):
    with torch.no_grad():
        return kernel.layers.GeGLUMLP.forward(module, x)


@pytest.mark.kernels_ci
def test_geglu_mlp_runs_plain_projections_through_geglu_linear(kernel, device, fused_launches):
    module = _GemmaStyleMLP().to(device=device, dtype=torch.bfloat16)
    x = randn(2, 3, 16, dtype=torch.bfloat16, device=device)
    out = _kernel_forward(kernel, module, x)
    with torch.no_grad():
        assert rel_error(out, module(x)) <= 1e-2
    assert fused_launches == ([6] if kernel.triton_gemm_kernels.fused_pays_off(6) else [])


def test_geglu_mlp_under_autocast_runs_in_its_dtype(kernel, device, fused_launches):
    """fp32 weights in an autocast region: eager's projections run in the autocast dtype, and so do ours (the fused GEMM)."""
    module = _GemmaStyleMLP().to(device)
    x = randn(2, 3, 16, device=device)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        out = _kernel_forward(kernel, module, x)
        with torch.no_grad():
            expected = module(x)
    assert out.dtype == expected.dtype == torch.bfloat16
    assert rel_error(out, expected) <= 1e-2
    assert fused_launches == ([6] if kernel.triton_gemm_kernels.fused_pays_off(6) else [])


def test_geglu_mlp_calls_projections_that_are_not_plain_linear(kernel, device, fused_launches):
    """A Linear subclass, or a forward hook, changes what the projection computes: the layer calls it."""
    subclassed = _GemmaStyleMLP(linear=_ScaledLinear).to(device)
    hooked = _GemmaStyleMLP().to(device)
    hooked.up_proj.register_forward_hook(lambda module, args, output: output + 1)
    x = randn(4, 16, device=device)
    for module in (subclassed, hooked):
        assert not kernel.layers.is_plain_linear(module.up_proj)
        with torch.no_grad():
            assert rel_error(_kernel_forward(kernel, module, x), module(x)) <= 1e-5
    assert fused_launches == []
