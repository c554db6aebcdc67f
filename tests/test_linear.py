"""geglu_linear: the gate and up projections and the GeGLU in one Triton GEMM (inference), else two GEMMs;
geglu_mlp: that, then the down projection through the same GEMM's plain form at decode, else cuBLAS.

On the CPU the kernels run under TRITON_INTERPRET=1 with the H200's launch
tables; on a GPU with the device's own. Either way the fused kernel runs
where its table has a class for the call (every class's configuration is
also exercised explicitly), and the plain form where the down projection's
table has one (its decode class).
"""

from __future__ import annotations

import dataclasses
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


def _count_launches(kernel, monkeypatch, gated: bool) -> list:
    """The GEMM kernel's launches, gated (the fused first half) or plain (the down projection), made while the
    test runs (each a token count)."""
    gemm = kernel.triton_gemm_kernels
    launches = []
    launch_gemm = gemm.launch_gemm

    def counting_launch(launch, *operands):
        if dict(launch.options.constexprs)["GATED"] is gated:
            launches.append(launch.scalars[0])
        return launch_gemm(launch, *operands)

    monkeypatch.setattr(gemm, "launch_gemm", counting_launch)
    return launches


@pytest.fixture
def fused_launches(kernel, monkeypatch):
    """The fused GEMM launches made while the test runs (each a token count)."""
    return _count_launches(kernel, monkeypatch, gated=True)


@pytest.fixture
def down_proj_launches(kernel, monkeypatch):
    """The plain GEMM launches (down projections) made while the test runs (each a token count)."""
    return _count_launches(kernel, monkeypatch, gated=False)


def _assert_within_eager_error(out, eager, exact):
    """out's error against float64 within the dtype's tolerance, or within twice eager's own error."""
    assert out.shape == eager.shape and out.dtype == eager.dtype and out.device == eager.device
    err, eager_err = rel_error(out, exact), rel_error(eager, exact)
    bound = max(FORWARD_REL_TOL[out.dtype], ERROR_RATIO_TO_EAGER * eager_err)
    assert err <= bound, f"relative error {err:.3g} vs float64 (eager's {eager_err:.3g})"


def _assert_matches_eager_error(out, operands, approximate):
    """geglu_linear's output within eager's error (see _assert_within_eager_error)."""
    exact = geglu_linear64(*operands, approximate)
    _assert_within_eager_error(out, eager_geglu_linear(*operands, approximate), exact)


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
    for config in {c.config for _, table in kernel.device_tables.GEMM_TABLES for c in table}:
        tokens = config.block_m + 3
        operands = linear_inputs((tokens,), config.block_k + 40, config.block_n + 5, dtype=dtype, device=device, bias=True)
        x, gate_weight, up_weight, gate_bias, up_bias = operands
        out = torch.full((tokens, gate_weight.shape[0]), float("nan"), dtype=dtype, device=device)
        gemm.launch_geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, out, "tanh", config)
        _assert_matches_eager_error(out, operands, "tanh")


@pytest.mark.kernels_ci
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_every_down_proj_table_config_is_correct(kernel, device, dtype):
    """The plain form with each device's down-projection configuration, on a problem none of its block sizes divides."""
    gemm = kernel.triton_gemm_kernels
    for config in {c.config for _, table in kernel.device_tables.DOWN_PROJ_TABLES for c in table}:
        tokens, n_in, n_out = config.block_m + 3, config.block_k + 40, config.block_n + 5
        x = randn(tokens, n_in, dtype=dtype, device=device)
        weight = randn(n_out, n_in, dtype=dtype, device=device, scale=n_in**-0.5)
        bias = randn(n_out, dtype=dtype, device=device)
        out = torch.full((tokens, n_out), float("nan"), dtype=dtype, device=device)
        gemm.launch_linear(x, weight, bias, out, config)
        exact = torch.nn.functional.linear(x.double(), weight.double(), bias.double())
        _assert_within_eager_error(out, torch.nn.functional.linear(x, weight, bias), exact)


def test_a_gemm_result_with_other_strides_is_not_written_through_a_copy(kernel, device, monkeypatch):
    """The GeGLU is written over the gate projection where it can be: over a column-major one (as F.linear returns
    for a sparse weight) it went into a contiguous copy, and the gate projection itself was returned."""
    x, gate_weight, up_weight = randn(3, 8, device=device), randn(12, 8, device=device), randn(12, 8, device=device)
    expected = eager_geglu_linear(x, gate_weight, up_weight, None, None, "tanh")
    linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *args: linear(*args).t().contiguous().t())
    assert rel_error(kernel.geglu_linear(x, gate_weight, up_weight), expected) <= FORWARD_REL_TOL[torch.float32]


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
    assert fused_launches == _expected_fused_launches(5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_inference_runs_the_fused_kernel(kernel, device, fused_launches, dtype):
    operands = linear_inputs((3,), 48, 40, dtype=dtype, device=device)
    with torch.no_grad():
        kernel.geglu_linear(*operands)
    assert fused_launches == _expected_fused_launches(3, dtype)


@pytest.mark.parametrize("tokens", [64, 65, 200, 257])
def test_the_table_decides_where_cublas_takes_over(kernel, device, fused_launches, tokens):
    """Small weights run fused past 64 tokens where the device's table has a class for them (the H200's:
    to 256 tokens), cuBLAS past it; eager's result either way."""
    operands = linear_inputs((tokens,), 48, 40, dtype=torch.bfloat16, device=device, bias=True)
    with torch.no_grad():
        out = kernel.geglu_linear(*operands)
    _assert_matches_eager_error(out, operands, "tanh")
    if device == "cpu":  # the interpreter runs the H200's table: small weights fused to 256 tokens
        expected = [tokens] if tokens <= 256 else []
    else:  # this GPU's table, whichever it is
        config = kernel.triton_gemm_kernels.fused_config(tokens, operands[1].nbytes, operands[1].get_device())
        expected = [tokens] if config else []
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
def test_fused_gate_up_weight_halves_are_read_in_place(kernel, device, monkeypatch, bias):
    """The fused GEMM gets the two halves of gate_up_weight as views of it (no copy), in order."""
    x, gate_weight, up_weight, gate_bias, up_bias = linear_inputs(
        (5,), 32, 24, dtype=torch.bfloat16, device=device, bias=bias
    )
    gate_up_weight = torch.cat([gate_weight, up_weight])
    gate_up_bias = torch.cat([gate_bias, up_bias]) if bias else None
    gemm, weights_read = kernel.triton_gemm_kernels, []
    launch_gemm = gemm.launch_gemm

    def recording_launch(launch, x, gate, up, *args):
        weights_read.append((gate.data_ptr(), up.data_ptr()))
        return launch_gemm(launch, x, gate, up, *args)

    monkeypatch.setattr(gemm, "launch_gemm", recording_launch)
    with torch.no_grad():
        fused = kernel.geglu_linear_concat(x, gate_up_weight, gate_up_bias, approximate="none")
        separate = kernel.geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate="none")
    assert torch.equal(fused, separate)
    halves = (gate_up_weight.data_ptr(), gate_up_weight[24:].data_ptr())
    assert weights_read == [halves, (gate_weight.data_ptr(), up_weight.data_ptr())]


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
    # Each rule that the checks' one-expression test of a call without biases covers, broken alone.
    (lambda: _linear_args(x=[[0.0] * 8] * 3), TypeError, "x must be a torch.Tensor"),
    (lambda: _linear_args(gate_weight=[[0.0] * 8] * 6), TypeError, "gate_weight must be a torch.Tensor"),
    (lambda: _linear_args(up_weight=None), TypeError, "up_weight must be a torch.Tensor"),
    (lambda: _linear_args(gate_weight=randn(6, 8).half()), TypeError, "gate_weight must have x's dtype"),
    (lambda: _linear_args(gate_weight=randn(6, 8, device="meta")), ValueError, "gate_weight must be on x's device"),
    (lambda: _linear_args(up_weight=randn(6, 8, device="meta")), ValueError, "up_weight must be on x's device"),
    (lambda: _linear_args(x=randn(3, 7)), ValueError, "gate_weight must be [intermediate, 7]"),
    (lambda: {**_linear_args(), "approximate": "erf"}, ValueError, "approximate must be one of"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("make_args, error, message", BAD_LINEAR_INPUTS, ids=[b[-1] for b in BAD_LINEAR_INPUTS])
def test_bad_linear_inputs_get_clear_errors(kernel, make_args, error, message):
    with pytest.raises(error, match=re.escape(message)):
        kernel.geglu_linear(**make_args())


#: (x, gate_up_weight, gate_up_bias), error, message: the fused weight and bias named as passed, not as the
#: halves they are read as.
BAD_FUSED_GATE_UP_INPUTS = [
    (lambda: (randn(2, 8), randn(7, 8), None), ValueError, "gate_up_weight holds [gate | up] rows"),
    (lambda: (randn(2, 7), randn(6, 8), None), ValueError, "gate_up_weight must be [2 * intermediate, 7]"),
    (lambda: (randn(2, 8), randn(6, 8).half(), None), TypeError, "gate_up_weight must have x's dtype"),
    (lambda: (randn(2, 8), randn(6, 8, device="meta"), None), ValueError, "gate_up_weight must be on x's device"),
    (lambda: (randn(2, 8), randn(6, 8), randn(3)), ValueError, "gate_up_bias must have shape (6,)"),
    (lambda: (randn(2, 8), randn(6, 8), randn(6).half()), TypeError, "gate_up_bias must have x's dtype"),
]


@pytest.mark.parametrize("make_args, error, message", BAD_FUSED_GATE_UP_INPUTS, ids=[b[-1] for b in BAD_FUSED_GATE_UP_INPUTS])
def test_bad_fused_gate_up_inputs_get_clear_errors(kernel, make_args, error, message):
    with pytest.raises(error, match=re.escape(message)):
        kernel.geglu_linear_concat(*make_args())


@pytest.mark.kernels_ci
@pytest.mark.parametrize("op", ["geglu_linear", "geglu_mlp"])
@pytest.mark.parametrize("tokens", [3, 300], ids=["fused", "past-the-table"])
def test_opcheck(kernel, device, op, tokens):
    """Both paths: the fused GEMM, and past the table's classes the GEMMs with the GeGLU over the gate."""
    make_operands = linear_inputs if op == "geglu_linear" else _mlp_operands
    for dtype in (torch.bfloat16, torch.float32):
        operands = make_operands((tokens,), 16, 20, dtype=dtype, device=device, bias=True)
        torch.library.opcheck(getattr(kernel.ops, op), (*operands, "tanh"))


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
@pytest.mark.parametrize("tokens_shape", [(1, 1), (2, 3)], ids=["decode", "6-tokens"])
def test_the_layer_runs_plain_projections_through_geglu_mlp(
    kernel, device, fused_launches, down_proj_launches, tokens_shape
):
    """Both GEMMs of the decode path at one token (the fused first half, the plain down projection);
    the fused first half alone at 6."""
    module = _GemmaStyleMLP().to(device=device, dtype=torch.bfloat16)
    x = randn(*tokens_shape, 16, dtype=torch.bfloat16, device=device)
    out = _kernel_forward(kernel, module, x)
    with torch.no_grad():
        assert rel_error(out, module(x)) <= 1e-2
    tokens = math.prod(tokens_shape)
    assert fused_launches == _expected_fused_launches(tokens)
    assert down_proj_launches == _expected_down_proj_launches(tokens, torch.bfloat16)


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
    assert fused_launches == _expected_fused_launches(6)


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


# --- geglu_mlp: the whole MLP, the down projection through the GEMM's plain form at decode ---


def _mlp_operands(tokens_shape, hidden, intermediate, *, dtype, device, bias=False):
    """x, gate/up/down weights and biases in geglu_mlp's order; the down weight scaled as an initialized layer's."""
    x, gate_weight, up_weight, gate_bias, up_bias = linear_inputs(
        tokens_shape, hidden, intermediate, dtype=dtype, device=device, bias=bias
    )
    down_weight = randn(hidden, intermediate, dtype=dtype, device=device, scale=max(intermediate, 1) ** -0.5)
    down_bias = randn(hidden, dtype=dtype, device=device) if bias else None
    return x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias


def _eager_mlp(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate="tanh"):
    hidden = eager_geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate)
    return torch.nn.functional.linear(hidden, down_weight, down_bias)


def _mlp64(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate="tanh"):
    hidden = geglu_linear64(x, gate_weight, up_weight, gate_bias, up_bias, approximate)
    return torch.nn.functional.linear(hidden, down_weight.double(), None if down_bias is None else down_bias.double())


#: What every device's launch tables promise (README, "at most 64 tokens on every table"), written out
#: rather than read from the tables under test: bf16/fp16 calls of up to 64 tokens through weights as
#: small as these tests' run the fused GEMM, and the down projection of one token its plain form.
EVERY_TABLE_FUSES_UP_TO = 64
GEMM_DTYPES = (torch.bfloat16, torch.float16)


def _expected_fused_launches(tokens, dtype=torch.bfloat16):
    """[tokens] for a call every device's table runs through the fused GEMM, else []."""
    return [tokens] if tokens <= EVERY_TABLE_FUSES_UP_TO and dtype in GEMM_DTYPES else []


def _expected_down_proj_launches(tokens, dtype):
    """[1] for the down projection of one bf16/fp16 token (its table's one class, on every device), else []."""
    return [1] if tokens == 1 and dtype in GEMM_DTYPES else []


@pytest.mark.kernels_ci
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("tokens_shape", [(1,), (5,), (2, 9)], ids=str)
def test_geglu_mlp_matches_eager(kernel, device, down_proj_launches, tokens_shape, dtype, bias):
    """1 token: the plain GEMM runs the down projection (its table's one class); 5 and 18: cuBLAS. Eager's
    error either way."""
    operands = _mlp_operands(tokens_shape, 40, 70, dtype=dtype, device=device, bias=bias)
    with torch.no_grad():
        out = kernel.geglu_mlp(*operands)
    _assert_within_eager_error(out, _eager_mlp(*operands), _mlp64(*operands))
    assert down_proj_launches == _expected_down_proj_launches(math.prod(tokens_shape), dtype)


def test_down_projections_of_large_weights_take_cublas(kernel, device, down_proj_launches, monkeypatch):
    """Past its class's weight limit cuBLAS's GEMV is as fast: a weight one byte over it takes F.linear."""
    tables = kernel.device_tables
    operands = _mlp_operands((1,), 40, 70, dtype=torch.bfloat16, device=device)
    caches = (kernel.triton_gemm_kernels.table_launch, tables.down_proj_gemm_config)
    try:
        for limit, expected in ((operands[3].nbytes, [1]), (operands[3].nbytes - 1, [])):
            limited = tuple(
                (needs, tuple(dataclasses.replace(c, max_weight_bytes=limit) for c in table))
                for needs, table in tables.DOWN_PROJ_TABLES
            )
            monkeypatch.setattr(tables, "DOWN_PROJ_TABLES", limited)
            for cache in caches:  # each remembers every (tokens, weight size, device) it answered for
                cache.cache_clear()
            with torch.no_grad():
                kernel.geglu_mlp(*operands)
            assert down_proj_launches == expected
            down_proj_launches.clear()
    finally:
        for cache in caches:
            cache.cache_clear()


@pytest.mark.parametrize("tokens", [1, 4])
def test_geglu_mlp_with_a_gradient_takes_the_training_path(kernel, device, down_proj_launches, tokens):
    """Weights requiring grad: one autograd step for the whole MLP, not the inference GEMMs (at one token
    the plain down projection would run); gradients as eager's."""
    operands = _mlp_operands((tokens,), 24, 40, dtype=torch.bfloat16, device=device, bias=True)
    ours, eager = ([t.clone().requires_grad_() for t in operands] for _ in range(2))
    grad_y = randn(tokens, 24, dtype=torch.bfloat16, device=device)
    y = kernel.geglu_mlp(*ours)
    assert type(y.grad_fn).__name__ == "GeGLUMLPFunctionBackward"
    y.backward(grad_y)
    _eager_mlp(*eager).backward(grad_y)
    assert down_proj_launches == []
    for mine, theirs in zip(ours, eager):
        assert rel_error(mine.grad, theirs.grad) <= 2e-2


def _padded(matrix: torch.Tensor) -> torch.Tensor:
    """The same values with rows 8 elements apart beyond their length: a unit column stride, not contiguous."""
    padded = torch.zeros(*matrix.shape[:-1], matrix.shape[-1] + 8, dtype=matrix.dtype, device=matrix.device)
    padded[..., : matrix.shape[-1]] = matrix
    return padded[..., : matrix.shape[-1]]


def _at_an_offset(matrix: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, 8 elements into their storage (16 bytes in bf16: still aligned)."""
    storage = torch.zeros(matrix.numel() + 8, dtype=matrix.dtype, device=matrix.device)
    storage[8:] = matrix.reshape(-1)
    return storage[8:].view(matrix.shape)


def _column_major(matrix: torch.Tensor) -> torch.Tensor:
    """The same values stored column by column: rows without a unit stride."""
    return matrix.t().contiguous().t()


def _set(index: int, change):
    """A change of the operand at ``index`` of geglu_mlp's operands."""

    def apply(operands: list) -> None:
        operands[index] = change(operands[index])

    return apply


def _each(*changes):
    """The changes, one after another."""

    def apply(operands: list) -> None:
        for change in changes:
            change(operands)

    return apply


#: Operands of the GEMM kernel in other layouts: (the change, whether the first half still runs fused at
#: n tokens, whether the down projection of one token still runs on the plain form). The kernel reads x,
#: the weights and out by row strides: rows with a unit column stride (a row view) run on it; x without a
#: row view (tokens transposed, which one token never is) and column-major weights go to cuBLAS.
LAYOUTS = {
    "x rows padded": (_set(0, _padded), lambda n: True, True),
    "x tokens transposed": (_set(0, lambda x: x.transpose(0, 1)), lambda n: n == 1, True),
    "weights rows padded": (_each(_set(1, _padded), _set(2, _padded), _set(3, _padded)), lambda n: True, True),
    "up weight rows padded, gate weight's not": (_set(2, _padded), lambda n: True, True),
    "x and weights at a storage offset": (
        _each(_set(0, _at_an_offset), _set(1, _at_an_offset), _set(2, _at_an_offset), _set(3, _at_an_offset)),
        lambda n: True,
        True,
    ),
    "up weight column-major": (_set(2, _column_major), lambda n: False, True),
    "down weight column-major": (_set(3, _column_major), lambda n: True, False),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("tokens_shape", [(1, 1), (2, 3)], ids=str)
def test_gemm_operands_in_other_layouts(kernel, device, fused_launches, down_proj_launches, layout, tokens_shape):
    """Each layout gives eager's result: through the GEMM kernel where its rows allow, else through cuBLAS."""
    change, fused, plain_down_proj = LAYOUTS[layout]
    operands = list(_mlp_operands(tokens_shape, 40, 24, dtype=torch.bfloat16, device=device))
    change(operands)
    with torch.no_grad():
        out = kernel.geglu_mlp(*operands)
    _assert_within_eager_error(out, _eager_mlp(*operands), _mlp64(*operands))
    tokens = math.prod(tokens_shape)
    assert fused_launches == ([tokens] if fused(tokens) else [])
    assert down_proj_launches == ([1] if tokens == 1 and plain_down_proj else [])


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("biases", [(False, False), (True, False), (False, True), (True, True)], ids=str)
def test_the_table_launch_carries_the_calls_form(kernel, device, approximate, biases):
    """The launch looked up for a call has that call's GELU form, bias flags and row strides as its constexprs and
    integers, also right after a call of the same shape in another layout (the flags differ by a relative 1e-4
    at most in the output, below any output tolerance: only the launch itself tells them apart)."""
    x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias = _mlp_operands(
        (1, 1), 40, 24, dtype=torch.bfloat16, device=device, bias=True
    )
    gate_bias, up_bias = (bias if present else None for bias, present in zip((gate_bias, up_bias), biases))
    for weights, strides in [((gate_weight, up_weight), (40, 40, 40, 24)), ((gate_weight, _padded(up_weight)), (40, 40, 48, 24))]:
        launch = kernel.ops._table_launch(x, *weights, gate_bias, up_bias, approximate)
        constexprs = dict(launch.options.constexprs)
        assert (constexprs["GATED"], constexprs["APPROXIMATE_TANH"]) == (True, approximate == "tanh")
        assert (constexprs["HAS_BIAS"], constexprs["HAS_UP_BIAS"]) == biases
        assert launch.scalars == (1, 24, 40, *strides) and launch.out_shape == (1, 1, 24)
    plain = kernel.ops._table_launch(x.new_zeros(1, 24), down_weight, None, down_bias if biases[0] else None, None, "none")
    constexprs = dict(plain.options.constexprs)
    assert (constexprs["GATED"], constexprs["HAS_BIAS"], constexprs["HAS_UP_BIAS"]) == (False, biases[0], False)


def test_geglu_mlp_empty_inputs(kernel, device):
    for tokens_shape, hidden, intermediate in [((0,), 8, 6), ((3,), 8, 0), ((2,), 0, 6)]:
        operands = _mlp_operands(tokens_shape, hidden, intermediate, dtype=torch.bfloat16, device=device, bias=True)
        with torch.no_grad():
            out = kernel.geglu_mlp(*operands)
        assert torch.equal(out.float(), _eager_mlp(*operands).float())


BAD_MLP_INPUTS = [
    ({"down_weight": randn(8, 5)}, ValueError, "down_weight must be [hidden, 6]"),
    ({"down_weight": randn(6)}, ValueError, "down_weight must be [hidden, 6]"),
    ({"down_weight": randn(8, 6).half()}, TypeError, "down_weight must have x's dtype"),
    ({"down_bias": randn(6)}, ValueError, "down_bias must have shape (8,)"),
    ({"down_weight": None}, TypeError, "down_weight must be a torch.Tensor"),
    ({"down_weight": randn(8, 6, device="meta")}, ValueError, "down_weight must be on x's device"),
    ({"up_weight": randn(6, 8, device="meta")}, ValueError, "up_weight must be on x's device"),
    ({"approximate": "erf"}, ValueError, "approximate must be one of"),
]


@pytest.mark.parametrize("changes, error, message", BAD_MLP_INPUTS, ids=[b[-1] for b in BAD_MLP_INPUTS])
def test_bad_mlp_inputs_get_clear_errors(kernel, changes, error, message):
    args = {**_linear_args(), "down_weight": randn(8, 6), "down_bias": None, **changes}
    with pytest.raises(error, match=re.escape(message)):
        kernel.geglu_mlp(**args)


def test_torch_compile_geglu_mlp_has_no_graph_break(kernel, device):
    operands = _mlp_operands((2, 5), 16, 24, dtype=torch.bfloat16, device=device, bias=True)

    def forward(x):
        return kernel.geglu_mlp(x, *operands[1:]) * 2

    compiled = compile_fullgraph(forward, device)
    with torch.no_grad():
        assert rel_error(compiled(operands[0]), forward(operands[0])) <= 1e-2
        assert torch._dynamo.explain(forward)(operands[0]).graph_break_count == 0
