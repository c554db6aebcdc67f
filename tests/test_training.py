"""Training: gradients rounded as eager autograd rounds them, and the MLP path that keeps less memory.

``GeGLUMLP`` in training with three plain ``nn.Linear`` projections runs one
autograd step for the whole MLP (``geglu_mlp``), with only a plain down
projection ``geglu_down_proj``: both keep x, gate and up, and the backward
kernel recomputes the GeGLU output h for down_proj's weight gradient.
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.autograd.forward_ad as forward_ad
import torch.nn as nn
import torch.nn.functional as F

from reference import (
    APPROXIMATIONS,
    BACKWARD_FP32_ULPS,
    LIGER_GRAD_TOLERANCE,
    MLP_GRAD_ERROR_RATIO_TO_EAGER,
    compile_fullgraph,
    randn,
    rel_error,
)

#: (bsz, seq_len, hidden, intermediate) from Liger-Kernel's test/transformers/test_geglu.py:
#: the odd MLP shape of its MLP test (9 x 41 tokens, 341, 4231) with the 9 x 7 tokens of its
#: functional test, since 369 tokens take minutes under the interpreter. At this size the
#: backward that kept fp32 until the store (before eager's rounding points) already puts
#: gate_proj's and up_proj's weight gradients outside the tolerance in a few elements.
LIGER_TEST_SIZE = (9, 7, 341, 4231)


@pytest.fixture(scope="module")
def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


class GemmaStyleMLP(nn.Module):
    """down_proj(gelu(gate_proj(x)) * up_proj(x)), as Gemma's MLP computes it."""

    def __init__(self, hidden, intermediate, approximate="tanh", bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act_fn = nn.GELU(approximate=approximate)

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _mlp(hidden, intermediate, *, dtype, device, approximate="tanh", bias=False):
    """A Gemma-style MLP with nn.Linear's initialization (projections of unit scale, as in a model)."""
    return GemmaStyleMLP(hidden, intermediate, approximate, bias).to(device=device, dtype=dtype)


def _copy(module, dtype=None):
    """The same MLP (weights, activation, device), in ``dtype`` if given, with the original forward."""
    gate_proj = module.gate_proj
    twin = GemmaStyleMLP(gate_proj.in_features, gate_proj.out_features, module.act_fn.approximate, gate_proj.bias is not None)
    twin.load_state_dict(module.state_dict())
    return twin.to(device=gate_proj.weight.device, dtype=dtype or gate_proj.weight.dtype)


def _kernelized(kernel, module):
    module.forward = types.MethodType(kernel.layers.GeGLUMLP.forward, module)
    return module


def _grads(module, x, grad_y):
    """(x, every parameter) gradients of one forward and backward."""
    x = x.detach().clone().requires_grad_()
    module.zero_grad(set_to_none=True)
    module(x).backward(grad_y)
    # torch.compile's wrapper names the parameters "_orig_mod.<name>".
    return {"x": x.grad, **{name.removeprefix("_orig_mod."): p.grad for name, p in module.named_parameters()}}


def _eager_ours_exact(kernel, module, x, grad_y):
    eager = _grads(_copy(module), x, grad_y)
    ours = _grads(_kernelized(kernel, _copy(module)), x, grad_y)
    exact = _grads(_copy(module, torch.float64), x.double(), grad_y.double())
    return eager, ours, exact


def _assert_like_eager(eager, ours, exact):
    """Each gradient within Liger's tolerance of eager's, and no further from float64 than eager's.

    "No further" up to the GEMMs' order of accumulation: a few fp32 ulps, which
    only an fp32 MLP's errors are small enough to notice.
    """
    assert ours.keys() == eager.keys()
    fp32_floor = BACKWARD_FP32_ULPS * torch.finfo(torch.float32).eps
    for name in eager:
        torch.testing.assert_close(ours[name], eager[name], **LIGER_GRAD_TOLERANCE, msg=lambda m: f"grad of {name}: {m}")
        ours_err, eager_err = rel_error(ours[name], exact[name]), rel_error(eager[name], exact[name])
        bound = MLP_GRAD_ERROR_RATIO_TO_EAGER * eager_err + fp32_floor
        assert ours_err <= bound, f"grad of {name}: {ours_err:.3g}, eager's {eager_err:.3g}"


@pytest.mark.kernels_ci
def test_bf16_mlp_gradients_match_eager_at_liger_test_size(kernel, device):
    """Liger's test of its GeGLU MLP, on ours: bf16 gradients of x and every weight within 1e-2 of eager's.

    Weights as nn.Linear initializes them. Liger's test draws unscaled
    standard-normal weights, so that |gate| ~ 18: there gelu' is 1 - tanh(z)^2
    of a tanh within an ulp of -1, which eager's own tanh gets no more right
    than ours, and the two differ beyond 1e-2 in about 1e-4 of the elements.
    """
    torch.manual_seed(0)
    bsz, seq_len, hidden, intermediate = LIGER_TEST_SIZE
    module = _mlp(hidden, intermediate, dtype=torch.bfloat16, device=device)
    x = randn(bsz, seq_len, hidden, dtype=torch.bfloat16, device=device)
    grad_y = randn(bsz, seq_len, hidden, dtype=torch.bfloat16, device=device)
    _assert_like_eager(*_eager_ours_exact(kernel, module, x, grad_y))


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_training_path_gradients_with_biases(kernel, device, dtype, approximate):
    module = _mlp(48, 136, dtype=dtype, device=device, approximate=approximate, bias=True)
    x = randn(2, 7, 48, dtype=dtype, device=device)
    grad_y = randn(2, 7, 48, dtype=dtype, device=device)
    _assert_like_eager(*_eager_ours_exact(kernel, module, x, grad_y))


def _saved_activation_bytes(module, x):
    """Bytes of the distinct storages autograd saves in a forward, parameters excepted, and their shapes."""
    parameter_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameter_storages:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(x)
    return sum(saved.values()), len(saved)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-mode", "torch.compile"])
def test_mixed_precision_training_under_autocast_matches_eager(kernel, device, compiled):
    """torch.autocast over fp32 weights, as mixed-precision training runs: the forward in the autocast
    dtype where eager's is, and fp32 gradients on the fp32 weights as close to eager's as in bf16;
    also with the layer under torch.compile(fullgraph=True), which must trace the autocast query."""
    module = _mlp(48, 136, dtype=torch.float32, device=device, bias=True)
    x = randn(2, 7, 48, device=device)
    grad_y = randn(2, 7, 48, dtype=torch.bfloat16, device=device)

    def forward_and_backward(twin):
        x_leaf = x.clone().requires_grad_()
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            y = twin(x_leaf)
        y.backward(grad_y)
        # torch.compile's wrapper names the parameters "_orig_mod.<name>".
        grads = {name.removeprefix("_orig_mod."): p.grad for name, p in twin.named_parameters()}
        return y, {"x": x_leaf.grad, **grads}

    eager_y, eager = forward_and_backward(_copy(module))
    kernelized = _kernelized(kernel, _copy(module))
    if compiled:
        kernelized = compile_fullgraph(kernelized, device)
    ours_y, ours = forward_and_backward(kernelized)
    assert ours_y.dtype == eager_y.dtype == torch.bfloat16
    assert rel_error(ours_y, eager_y) <= 1e-2
    for name in eager:
        assert ours[name].dtype == torch.float32, name
        torch.testing.assert_close(ours[name], eager[name], **LIGER_GRAD_TOLERANCE, msg=lambda m: f"grad of {name}: {m}")


def test_training_path_saves_x_gate_and_up_only(kernel, device):
    tokens, hidden, intermediate = 6, 32, 96
    module = _mlp(hidden, intermediate, dtype=torch.bfloat16, device=device)
    x = randn(tokens, hidden, dtype=torch.bfloat16, device=device).requires_grad_()
    activation = tokens * intermediate * 2  # bytes of one [tokens, intermediate] bf16 tensor
    eager_bytes, eager_count = _saved_activation_bytes(module, x)
    ours_bytes, ours_count = _saved_activation_bytes(_kernelized(kernel, module), x)
    assert (eager_count, eager_bytes) == (5, x.nbytes + 4 * activation)  # x, gate, gelu(gate), up, h
    assert (ours_count, ours_bytes) == (3, x.nbytes + 2 * activation)  # x, gate, up


def test_training_path_backward_twice_with_retained_graph(kernel, device):
    module = _kernelized(kernel, _mlp(24, 40, dtype=torch.bfloat16, device=device, bias=True))
    x = randn(3, 24, dtype=torch.bfloat16, device=device).requires_grad_()
    y = module(x)
    grad_y = randn(3, 24, dtype=torch.bfloat16, device=device)
    inputs = (x, *module.parameters())
    first = torch.autograd.grad(y, inputs, grad_y, retain_graph=True)
    second = torch.autograd.grad(y, inputs, grad_y)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def _gelu(t):
    return F.gelu(t, approximate="tanh")


def _function_calls(kernel, device, hidden=24, intermediate=40, tokens=3):
    """Each differentiable public function on fp32 leaves, as (name, ours, eager, leaves): ``ours(*leaves)``
    calls it, ``eager(*leaves)`` computes the same with PyTorch's ops."""
    x, gate, up = (randn(tokens, n, device=device).requires_grad_() for n in (hidden, intermediate, intermediate))
    # Weights of a unit-scale projection, as a model's (nn.Linear's initialization scale).
    gate_weight, up_weight = (
        randn(intermediate, hidden, device=device, scale=max(hidden, 1) ** -0.5).requires_grad_() for _ in range(2)
    )
    down_weight = randn(hidden, intermediate, device=device, scale=max(intermediate, 1) ** -0.5).requires_grad_()
    gate_up_weight = torch.cat([gate_weight, up_weight]).detach().requires_grad_()
    concat = torch.cat([gate, up], dim=-1).detach().requires_grad_()

    def eager_mlp_half(x, gate_weight, up_weight):
        return _gelu(F.linear(x, gate_weight)) * F.linear(x, up_weight)

    return [
        ("geglu", kernel.geglu, lambda g, u: _gelu(g) * u, (gate, up)),
        ("geglu_concat", kernel.geglu_concat, lambda c: _gelu(c[:, :intermediate]) * c[:, intermediate:], (concat,)),
        ("geglu_linear", kernel.geglu_linear, eager_mlp_half, (x, gate_weight, up_weight)),
        (
            "geglu_linear_concat",
            kernel.geglu_linear_concat,
            lambda x, w: eager_mlp_half(x, w[:intermediate], w[intermediate:]),
            (x, gate_up_weight),
        ),
        ("geglu_down_proj", kernel.geglu_down_proj, lambda g, u, dw: F.linear(_gelu(g) * u, dw), (gate, up, down_weight)),
        (
            "geglu_mlp",
            kernel.geglu_mlp,
            lambda x, gw, uw, dw: F.linear(eager_mlp_half(x, gw, uw), dw),
            (x, gate_weight, up_weight, down_weight),
        ),
    ]


#: The functions with projections: what torch.autocast casts (it leaves eager's GELU and multiply alone).
_WITH_PROJECTIONS = ("geglu_linear", "geglu_linear_concat", "geglu_down_proj", "geglu_mlp")


def test_a_second_derivative_is_an_error_not_a_wrong_gradient(kernel, device):
    """The backwards run kernels that autograd cannot differentiate: create_graph=True raises. Under
    once_differentiable it raised only for a loss whose gradient depends on the output (the square); for a
    loss linear in it (the sum) the gradients came back as constants to autograd, and a gradient penalty on
    them silently contributed nothing."""
    for name, ours, _, leaves in _function_calls(kernel, device):
        for loss in (torch.sum, lambda y: y.square().sum()):
            with pytest.raises(RuntimeError, match="first derivatives only"):
                torch.autograd.grad(loss(ours(*leaves)), leaves, create_graph=True)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")  # jit.trace's own
def test_forward_mode_ad_function_transforms_and_jit_tracing_are_refused(kernel, device):
    """Forward-mode AD dropped the tangent silently (a dual gate gave a result without one; geglu_linear's
    result carried the gate projection's), vmap's batched tensors and torch.jit.trace failed deep in Triton:
    every public function refuses them by name, and so does gelu_and_mul."""
    refused = pytest.raises(NotImplementedError, match="forward-mode AD, torch.func transforms .* or torch.jit.trace")
    calls = [
        (name, ours, [leaf.detach() for leaf in leaves]) for name, ours, _, leaves in _function_calls(kernel, device)
    ]
    x = randn(3, 8, device=device)
    calls.append(("gelu_and_mul", lambda x: kernel.gelu_and_mul(torch.empty_like(x[..., :4]), x), [x]))
    for name, ours, plain in calls:
        with forward_ad.dual_level():
            first = forward_ad.make_dual(plain[0], torch.ones_like(plain[0]))
            with refused:
                ours(first, *plain[1:])
        with refused:
            torch.func.vmap(ours)(*(tensor.unsqueeze(0) for tensor in plain))
        with refused:
            torch.func.grad(lambda *args: ours(*args).sum())(*plain)
        with refused:
            torch.func.jvp(ours, tuple(plain), tuple(torch.ones_like(tensor) for tensor in plain))
        with refused:
            torch.jit.trace(ours, tuple(plain), check_trace=False)


def test_functions_under_autocast_train_as_eager(kernel, device):
    """fp32 leaves in a bf16 autocast region, each function with projections called directly: the result in
    bf16 whether or not grad mode is on (as eager's projections return it), and a backward that gives each
    leaf an fp32 gradient within Liger's tolerance of eager's. The functions cast every operand, as autocast
    casts the operands of nn.Linear: given fp32 gate and up, geglu_down_proj computes the GeGLU in bf16, where
    eager's separate GELU and multiply would stay in fp32 until the projection casts their product."""
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    for name, ours, eager, leaves in _function_calls(kernel, device):
        if name not in _WITH_PROJECTIONS:
            continue
        if name == "geglu_down_proj":
            eager = lambda g, u, dw: F.linear(_gelu(g.bfloat16()) * u.bfloat16(), dw)  # noqa: E731
        with autocast, torch.no_grad():
            assert ours(*leaves).dtype == torch.bfloat16, name
        with autocast:
            got, expected = ours(*leaves), eager(*leaves)
        assert got.dtype == expected.dtype == torch.bfloat16, name
        grad_y = randn(*got.shape, dtype=torch.bfloat16, device=device)
        for leaf, grad, eager_grad in zip(leaves, torch.autograd.grad(got, leaves, grad_y), torch.autograd.grad(expected, leaves, grad_y)):
            assert grad.dtype == leaf.dtype == torch.float32, name
            torch.testing.assert_close(grad, eager_grad, **LIGER_GRAD_TOLERANCE, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("hidden, intermediate", [(24, 0), (0, 40)])
def test_backward_through_an_empty_dimension_gives_eager_gradients(kernel, device, hidden, intermediate):
    """An intermediate or hidden size of 0: every function's gradients of the leaves' shapes, equal to eager's
    (empty, zero, or through the GeGLU where only the projections are empty)."""
    for name, ours, eager, leaves in _function_calls(kernel, device, hidden=hidden, intermediate=intermediate):
        got, expected = ours(*leaves), eager(*leaves)
        assert got.shape == expected.shape, name
        grad_y = randn(*got.shape, device=device)
        for leaf, grad, eager_grad in zip(leaves, torch.autograd.grad(got, leaves, grad_y), torch.autograd.grad(expected, leaves, grad_y)):
            assert grad.shape == leaf.shape, name
            assert rel_error(grad, eager_grad) <= 1e-5, name


def test_zero_tokens_backward_from_a_sum_gives_zero_gradients(kernel, device):
    """``y.sum().backward()`` hands the backward an expanded gradient (stride 0) of zero rows, which has no row view
    and which ``contiguous`` leaves as it is (an empty tensor counts as contiguous)."""
    for name, ours, eager, leaves in _function_calls(kernel, device, tokens=0):
        for leaf, grad, eager_grad in zip(
            leaves, torch.autograd.grad(ours(*leaves).sum(), leaves), torch.autograd.grad(eager(*leaves).sum(), leaves)
        ):
            assert grad.shape == leaf.shape and torch.equal(grad, eager_grad), name


@pytest.mark.parametrize("registered_op", [False, True], ids=["eager-mode", "registered-op"])
def test_an_inference_tensor_trains_the_other_operands_as_in_eager(kernel, device, registered_op):
    """gate or up made under torch.inference_mode, the other operand trained: eager saves what it computed from them
    and trains; ours keeps a copy of such an input, where autograd would refuse to save it. The registered op's
    setup keeps the same tensors (a negated leaf sends the call there)."""
    def made_in_inference_mode(*shape):
        with torch.inference_mode():
            return randn(*shape, device=device)

    route = torch._neg_view if registered_op else (lambda t: t)
    gate, up = made_in_inference_mode(3, 20), made_in_inference_mode(3, 20)
    trained_up, down_weight = randn(3, 20, device=device), randn(8, 20, device=device)
    for leaf in (trained_up, down_weight):
        leaf.requires_grad_()
    # geglu: gate from inference mode, up trained
    ours = torch.autograd.grad(kernel.geglu(gate, route(trained_up)).sum(), trained_up)[0]
    eager = torch.autograd.grad((F.gelu(gate, approximate="tanh") * route(trained_up)).sum(), trained_up)[0]
    assert rel_error(ours, eager) <= 1e-6
    # geglu_down_proj: both from inference mode, down_proj's weight trained
    ours = torch.autograd.grad(kernel.geglu_down_proj(gate, up, route(down_weight)).sum(), down_weight)[0]
    eager = torch.autograd.grad(F.linear(F.gelu(gate, approximate="tanh") * up, route(down_weight)).sum(), down_weight)[0]
    assert rel_error(ours, eager) <= 1e-6


@pytest.mark.parametrize("plain", [True, False], ids=["plain-projections", "hooked-gate-proj"])
def test_enable_grad_inside_inference_mode_records_nothing_as_in_eager(kernel, device, plain):
    """Grad mode is on there, but autograd records nothing: ours tried to save inference tensors for a backward
    ("Inference tensors cannot be saved for backward"), and geglu returned a result with a grad_fn."""
    module = _mlp(24, 40, dtype=torch.float32, device=device, bias=True)
    reference, ours = _copy(module), _kernelized(kernel, _copy(module))
    if not plain:  # not a plain nn.Linear: the GeGLU and down_proj through geglu_down_proj
        ours.gate_proj.register_forward_hook(lambda *args: None)
    x, gate, up = randn(3, 24, device=device), randn(3, 40, device=device), randn(3, 40, device=device)
    gate.requires_grad_()
    with torch.inference_mode(), torch.enable_grad():
        results = [
            (ours(x), reference(x)),
            (kernel.geglu(gate, up), F.gelu(gate, approximate="tanh") * up),
            (kernel.geglu_concat(torch.cat([gate, up], -1)), F.gelu(gate, approximate="tanh") * up),
        ]
    for got, expected in results:
        assert got.grad_fn is None and not got.requires_grad and got.is_inference()
        assert rel_error(got, expected) <= 1e-5


@pytest.mark.parametrize("x_requires_grad", [False, True])
def test_training_path_only_computes_the_gradients_asked_for(kernel, device, x_requires_grad):
    """Frozen down_proj (no weight gradient: h is not recomputed) and frozen gate/up projections."""
    module = _mlp(24, 40, dtype=torch.float32, device=device, bias=True)
    x = randn(3, 24, device=device)
    grad_y = randn(3, 24, device=device)
    for frozen in ("down_proj", "gate_proj"):
        reference, ours = _copy(module), _kernelized(kernel, _copy(module))
        x_grads = []
        for twin in (reference, ours):
            getattr(twin, frozen).requires_grad_(False)
            if frozen == "gate_proj":
                twin.up_proj.requires_grad_(False)
            x_leaf = x.clone().requires_grad_(x_requires_grad)
            twin(x_leaf).backward(grad_y)
            x_grads.append(x_leaf.grad)
        for (name, p), q in zip(reference.named_parameters(), ours.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                assert rel_error(q.grad, p.grad) <= 1e-5, name
        expected_x_grad, x_grad = x_grads
        assert (x_grad is None) == (not x_requires_grad)
        if x_requires_grad:
            assert rel_error(x_grad, expected_x_grad) <= 1e-5


def test_training_path_keeps_x_only_for_the_projections_weight_gradients(kernel, device):
    """With gate_proj and up_proj frozen, x's gradient needs their weights, not x: autograd keeps gate and up only."""
    tokens, hidden, intermediate = 6, 32, 96
    module = _kernelized(kernel, _mlp(hidden, intermediate, dtype=torch.bfloat16, device=device))
    module.gate_proj.requires_grad_(False)
    module.up_proj.requires_grad_(False)
    x = randn(tokens, hidden, dtype=torch.bfloat16, device=device).requires_grad_()
    assert _saved_activation_bytes(module, x) == (2 * tokens * intermediate * 2, 2)


def test_the_whole_mlp_is_one_autograd_step_whose_gemms_sum_the_input_gradient(kernel, device):
    """Plain projections: one node for the MLP, and x's gradient summed in the projections' GEMMs (addmm),
    with no add of two [tokens, hidden] products after them (autograd's, for eager's two projections)."""
    from torch.profiler import profile

    module = _mlp(24, 40, dtype=torch.bfloat16, device=device)
    x = randn(3, 24, dtype=torch.bfloat16, device=device)
    grad_y = randn(3, 24, dtype=torch.bfloat16, device=device)
    backward_ops = {}
    for name, twin in (("eager", _copy(module)), ("ours", _kernelized(kernel, _copy(module)))):
        y = twin(x.detach().requires_grad_())  # a leaf of its own: no gradient to accumulate into
        if name == "ours":
            assert type(y.grad_fn).__name__ == "GeGLUMLPFunctionBackward"
        with profile() as prof:
            y.backward(grad_y)
        backward_ops[name] = {event.name for event in prof.events()}
    assert "aten::add_" in backward_ops["eager"]
    assert "aten::addmm_" in backward_ops["ours"]
    assert not {"aten::add_", "aten::add"} & backward_ops["ours"]


def test_projections_that_are_not_plain_keep_their_own_autograd(kernel, device):
    """A hooked gate_proj is called as a module: the GeGLU and down_proj are one step, the projections autograd's."""
    module = _kernelized(kernel, _mlp(24, 40, dtype=torch.bfloat16, device=device))
    module.gate_proj.register_forward_hook(lambda mod, args, out: None)
    y = module(randn(3, 24, dtype=torch.bfloat16, device=device).requires_grad_())
    assert type(y.grad_fn).__name__ == "GeGLUDownProjFunctionBackward"


def test_a_frozen_mlp_in_grad_mode_takes_the_inference_path(kernel, device, monkeypatch):
    """Grad mode on but nothing to differentiate (a frozen model called without no_grad): no autograd step,
    the inference path of geglu_mlp (the fused GEMM at decode), eager's output."""
    module = _mlp(24, 40, dtype=torch.bfloat16, device=device).requires_grad_(False)
    x = randn(3, 24, dtype=torch.bfloat16, device=device)
    reference = _copy(module)(x)
    training_path = types.SimpleNamespace(apply=lambda *args: pytest.fail("training path taken"))
    monkeypatch.setattr(kernel.ops, "GeGLUMLPFunction", training_path)
    inference_calls = []
    mlp_impl = kernel.ops.geglu_mlp_impl

    def counted_mlp_impl(*args, **kwargs):
        inference_calls.append(1)
        return mlp_impl(*args, **kwargs)

    monkeypatch.setattr(kernel.ops, "geglu_mlp_impl", counted_mlp_impl)
    out = _kernelized(kernel, module)(x)
    assert inference_calls == [1] and not out.requires_grad
    assert rel_error(out, reference) <= 1e-2


def test_training_path_under_torch_compile(kernel, device):
    module = _mlp(32, 72, dtype=torch.float32, device=device, bias=True)
    reference, ours = _copy(module), _kernelized(kernel, _copy(module))
    compiled = compile_fullgraph(ours, device)
    x = randn(2, 5, 32, device=device)
    grad_y = randn(2, 5, 32, device=device)
    expected, got = _grads(reference, x, grad_y), _grads(compiled, x, grad_y)
    for name in expected:
        assert rel_error(got[name], expected[name]) <= 1e-5, name


@pytest.mark.parametrize("mode_name", ["TRAINING", "TRAINING_COMPILE"])
def test_kernelize_training_gemma3_mlp_gradients(build_dir, kernel, device, mode_name):
    from kernels import LocalLayerRepository, Mode, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP

    mode = Mode.TRAINING if mode_name == "TRAINING" else Mode.TRAINING | Mode.TORCH_COMPILE
    replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")
    config = Gemma3TextConfig(hidden_size=32, intermediate_size=72, hidden_activation="gelu_pytorch_tanh")
    reference = nn.Sequential(Gemma3MLP(config), Gemma3MLP(config)).to(device)
    model = nn.Sequential(Gemma3MLP(config), Gemma3MLP(config)).to(device)
    model.load_state_dict(reference.state_dict())
    repo = LocalLayerRepository(repo_path=build_dir, layer_name="GeGLUMLP")
    with use_kernel_mapping({"GeGLUMLP": {"cpu": repo, "cuda": repo}}, inherit_mapping=False):
        kernelize(model, mode=mode, device=device)
    # kernelize falls back to the original forward where the layer does not declare the mode's needs
    # (has_backward, can_torch_compile): the gradients would then be eager's by construction.
    assert all(m.forward.__func__ is kernel.layers.GeGLUMLP.forward for m in model)
    if mode_name == "TRAINING_COMPILE":
        model = compile_fullgraph(model, device)
    x = randn(2, 3, 32, device=device)
    grad_y = randn(2, 3, 32, device=device)
    expected, got = _grads(reference, x, grad_y), _grads(model, x, grad_y)
    for name in expected:
        assert rel_error(got[name], expected[name]) <= 1e-5, name


def test_a_backward_in_an_autocast_region_of_a_forward_outside_it_trains_as_eager(kernel, device):
    """The forward in fp32 (autocast off inside an autocast region), the backward called inside the region: it
    failed on fp32 weights meeting autocast's bf16 products. Ours computes in the saved dtypes (eager's backward
    runs its GEMMs in bf16 there): within Liger's tolerance of eager's gradients, and no further from float64."""
    module = _mlp(24, 40, dtype=torch.float32, device=device, bias=True)
    x = randn(3, 24, device=device)
    grad_y = randn(3, 24, device=device)
    device_type = torch.device(device).type

    def grads_in_autocast(twin):
        with torch.autocast(device_type, dtype=torch.bfloat16):
            with torch.autocast(device_type, enabled=False):
                return _grads(twin, x, grad_y)

    eager, ours = grads_in_autocast(_copy(module)), grads_in_autocast(_kernelized(kernel, _copy(module)))
    exact = _grads(_copy(module, torch.float64), x.double(), grad_y.double())
    assert all(gradient.dtype == torch.float32 for gradient in ours.values())
    _assert_like_eager(eager, ours, exact)


@pytest.mark.parametrize("function", ["geglu_mlp", "geglu_down_proj"])
def test_what_the_training_path_keeps_follows_the_gradients_asked_for(kernel, device, function):
    """As eager's projections keep a weight only for their input's gradient: with x and the gate and up
    projections frozen, only the down projection's weight needs anything (gate and up, to recompute h); with
    its bias alone training, nothing is kept at all. So a frozen weight updated in place before the backward
    (an EMA, a re-quantization), or made under inference_mode, trains the rest as in eager."""
    tokens, hidden, intermediate = 6, 32, 96
    with torch.inference_mode():  # frozen weights, made as a quantization tool would
        frozen = [randn(intermediate, hidden, device=device, scale=hidden**-0.5) for _ in range(2)]
    down_weight = randn(hidden, intermediate, device=device, scale=intermediate**-0.5)
    down_bias = randn(hidden, device=device)
    x = randn(tokens, hidden, device=device)

    def eager(gate_weight, up_weight, down_weight, down_bias):
        return F.linear(F.gelu(F.linear(x, gate_weight), approximate="tanh") * F.linear(x, up_weight), down_weight, down_bias)

    def ours(gate_weight, up_weight, down_weight, down_bias):
        if function == "geglu_mlp":
            return kernel.geglu_mlp(x, gate_weight, up_weight, down_weight, None, None, down_bias)
        return kernel.geglu_down_proj(F.linear(x, gate_weight), F.linear(x, up_weight), down_weight, down_bias)

    for trains_weight, kept in ((True, 2), (False, 0)):
        leaves = (down_weight.clone().requires_grad_(trains_weight), down_bias.clone().requires_grad_())
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            y = ours(*frozen, *leaves)
        assert len(saved) == kept
        with torch.inference_mode():
            frozen[1].mul_(1.0)  # updated in place after the forward: it was not saved, so nothing objects
        y.backward(torch.ones_like(y))
        expected = [leaf.detach().clone().requires_grad_(leaf.requires_grad) for leaf in leaves]
        eager(*frozen, *expected).backward(torch.ones_like(y))
        for mine, theirs in zip(leaves, expected):
            assert (mine.grad is None) == (theirs.grad is None)
            if theirs.grad is not None:
                assert rel_error(mine.grad, theirs.grad) <= 1e-5


def test_batched_gradients_are_refused_by_name(kernel, device):
    """is_grads_batched=True runs the backward under vmap, whose batched tensors have no memory for the kernels:
    the eager Functions' backwards say so, where they failed deep inside a kernel launch or torch's out= path."""
    for name, ours, _, leaves in _function_calls(kernel, device):
        y = ours(*leaves)
        with pytest.raises(NotImplementedError, match="batched gradients"):
            torch.autograd.grad(y, leaves[0], torch.ones(2, *y.shape, device=device), is_grads_batched=True)


def test_a_transform_runs_hooks_on_projections_that_are_not_plain_once(kernel, device):
    """A hooked gate_proj (not plain: the fused functions call it) under torch.func.grad and vmap: the layer
    takes the module's own forward before calling any projection, so the hook runs once per forward, as eager's."""
    module = _kernelized(kernel, _mlp(24, 40, dtype=torch.float32, device=device))
    calls = []
    module.gate_proj.register_forward_hook(lambda *args: calls.append(1))
    x = randn(3, 24, device=device)
    for transform in (torch.func.grad(lambda x: module(x).sum()), torch.func.vmap(module)):
        calls.clear()
        transform(x)
        assert len(calls) == 1


def test_the_registered_ops_refuse_second_derivatives_by_name(kernel, device):
    """The registered ops' route (torch.compile's, and eager calls on tensor subclasses): differentiating their
    backward again raises the eager Functions' message, not torch's missing-formula error."""
    gate, up = (randn(3, 8, device=device).requires_grad_() for _ in range(2))
    y = kernel.ops.geglu(gate, up, "tanh")
    grad_gate, _ = torch.autograd.grad(y.square().sum(), (gate, up), create_graph=True)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        grad_gate.sum().backward()


@pytest.mark.parametrize("grad_mode", [True, False], ids=["training", "inference"])
def test_projections_that_are_not_plain_compile_in_one_graph(kernel, device, grad_mode):
    """The layer asks whether a transform is active before calling projections that are not plain, outside
    torch.compile only: Dynamo cannot trace the tracer's flag, and the question broke fullgraph compiles of
    an MLP with a hooked (or LoRA, or quantized) projection into three graphs."""
    module = _kernelized(kernel, _mlp(24, 40, dtype=torch.float32, device=device))
    module.gate_proj.register_forward_hook(lambda mod, args, out: None)
    x = randn(3, 24, device=device)
    with torch.set_grad_enabled(grad_mode):
        compiled = compile_fullgraph(module, device)
        assert rel_error(compiled(x), module(x)) <= 1e-5
        assert torch._dynamo.explain(module)(x).graph_break_count == 0


def test_a_first_order_backward_inside_a_forward_ad_level_runs(kernel, device):
    """Forward outside any transform, backward inside ``forward_ad.dual_level``: a plain first-order backward,
    which the batched-backward check refused by the forward-AD level (with a message about batched gradients)."""
    module = _mlp(24, 40, dtype=torch.float32, device=device)
    x = randn(3, 24, device=device)
    grad_y = randn(3, 24, device=device)
    expected = _grads(_copy(module), x, grad_y)
    ours = _kernelized(kernel, _copy(module))
    x_leaf = x.clone().requires_grad_()
    y = ours(x_leaf)
    with forward_ad.dual_level():
        y.backward(grad_y)
    assert rel_error(x_leaf.grad, expected["x"]) <= 1e-5
