"""The torch-op surface: opcheck, torch.compile, bad inputs, and the engines per device."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from geglu_triton.benchmarking.accuracy import MLP_REL_TOL
from reference import compile_fullgraph, geglu64, randn, rel_error


@pytest.fixture(scope="module")
def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _opcheck_cases(ops, device):
    gate = randn(3, 20, device=device).requires_grad_()
    up = randn(3, 20, device=device).requires_grad_()
    x = randn(3, 40, device=device).requires_grad_()
    grad = randn(3, 20, device=device)
    return [
        (ops.geglu, (gate, up, "tanh")),
        (ops.geglu, (gate, up, "none")),
        (ops.geglu_backward, (grad, gate.detach(), up.detach(), "tanh")),
        (ops.geglu_concat, (x, "none")),
        (ops.geglu_concat_backward, (grad, x.detach(), "tanh")),
        (ops.geglu_concat_out, (torch.empty(3, 20, device=device), x.detach(), "tanh")),
    ]


@pytest.mark.kernels_ci
def test_opcheck(kernel, device):
    for op, args in _opcheck_cases(kernel.ops, device):
        torch.library.opcheck(op, args)


def test_ops_live_in_the_kernel_namespace(kernel):
    namespace = kernel._ops.add_op_namespace_prefix("geglu").split("::")[0]
    assert namespace.startswith("_fused_geglu_")
    assert kernel.ops.geglu._qualname == f"{namespace}::geglu"


def test_torch_compile_fullgraph_has_no_graph_break(kernel, device):
    class TinyMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up = torch.nn.Linear(16, 2 * 24)
            self.down = torch.nn.Linear(24, 16)

        def forward(self, x):
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down(kernel.geglu(gate, up) + kernel.geglu_concat(self.gate_up(x), approximate="none"))

    model = TinyMLP().to(device)
    compiled = compile_fullgraph(model, device)
    x = randn(2, 5, 16, device=device).requires_grad_()
    expected = model(x)
    got = compiled(x)
    assert rel_error(got, expected) <= 1e-6
    got.sum().backward()
    assert x.grad is not None
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0


BAD_INPUTS = [
    ("geglu", lambda: (randn(3, 4), randn(3, 5)), {}, ValueError, "same shape"),
    ("geglu", lambda: (randn(3, 4), randn(3, 4).half()), {}, TypeError, "same dtype"),
    ("geglu", lambda: (randn(3, 4), randn(3, 4, device="meta")), {}, ValueError, "same device"),
    ("geglu", lambda: (torch.ones(3, 4, dtype=torch.int32),) * 2, {}, TypeError, "dtype torch.int32"),
    ("geglu", lambda: (torch.ones(3, 4, dtype=torch.bool),) * 2, {}, TypeError, "dtype torch.bool"),
    ("geglu", lambda: (randn(3, 4).double(),) * 2, {}, TypeError, "dtype torch.float64"),
    ("geglu", lambda: (randn(3, 4), [1.0]), {}, TypeError, "up must be a torch.Tensor"),
    ("geglu", lambda: (randn(3, 4).to_sparse(),) * 2, {}, TypeError, "gate is a sparse_coo tensor; GeGLU takes dense"),
    ("geglu_concat", lambda: (torch.nested.nested_tensor([randn(2, 4), randn(3, 4)], layout=torch.jagged),), {},
     TypeError, "x is a nested tensor"),
    ("gelu_and_mul", lambda: (torch.empty(3, 2), randn(3, 4).to_mkldnn()), {}, TypeError, "x is a mkldnn tensor"),
    ("geglu", lambda: (randn(3, 4), randn(3, 4)), {"approximate": "erf"}, ValueError, "approximate must be one of"),
    ("geglu_concat", lambda: (randn(3, 5),), {}, ValueError, "must be even"),
    ("geglu_concat", lambda: (randn(),), {}, ValueError, "at least one dimension"),
    ("geglu_concat", lambda: (randn(3, 4),), {"approximate": "Tanh"}, ValueError, "approximate must be one of"),
    ("gelu_and_mul", lambda: (torch.empty(3, 3), randn(3, 4)), {}, ValueError, "out must have shape (3, 2)"),
    ("gelu_and_mul", lambda: (torch.empty(3, 2).half(), randn(3, 4)), {}, TypeError, "out must have the input's dtype"),
    ("gelu_tanh_and_mul", lambda: (torch.empty(3, 2, device="meta"), randn(3, 4)), {}, ValueError, "out must be on"),
    ("gelu_tanh_and_mul", lambda: (torch.empty(3, 2), randn(3, 5)), {}, ValueError, "must be even"),
    ("gelu_and_mul", lambda: (torch.empty(1, 2).expand(3, 2), randn(3, 4)), {}, ValueError, "stride 0 in dimension 0"),
    # The projections' common call (no biases) is checked in one expression: a sparse weight passed it and gave the
    # gate projection itself (the GeGLU written over F.linear's strided result went into a copy).
    ("geglu_linear", lambda: (randn(2, 8), randn(12, 8).to_sparse(), randn(12, 8)), {}, TypeError,
     "gate_weight is a sparse_coo tensor"),
    ("geglu_mlp", lambda: (randn(2, 8), randn(12, 8), randn(12, 8).to_sparse_csr(), randn(8, 12)), {}, TypeError,
     "up_weight is a sparse_csr tensor"),
    ("geglu_mlp", lambda: (randn(2, 8), randn(12, 8), randn(12, 8), randn(8, 12).to_sparse()), {}, TypeError,
     "down_weight is a sparse_coo tensor"),
    ("geglu_linear", lambda: (randn(2, 8).to_mkldnn(), randn(12, 8), randn(12, 8)), {}, TypeError, "x is a mkldnn tensor"),
    ("geglu_mlp", lambda: (torch.nested.nested_tensor([randn(2, 8), randn(3, 8)], layout=torch.jagged), randn(12, 8),
                           randn(12, 8), randn(8, 12)), {}, TypeError, "x is a nested tensor"),
    # A nested tensor of the strided layout has no .shape to read: the common call's expression reads one.
    ("geglu_mlp", lambda: (torch.nested.nested_tensor([randn(2, 8), randn(3, 8)]), randn(12, 8), randn(12, 8),
                           randn(8, 12)), {}, TypeError, "x is a nested tensor"),
    ("geglu_linear", lambda: (randn(2, 8), torch.nested.nested_tensor([randn(8), randn(8)]), randn(2, 8)), {},
     TypeError, "gate_weight is a nested tensor"),
    ("geglu_mlp", lambda: (randn(2, 8), randn(2, 8), torch.nested.nested_tensor([randn(8), randn(8)]), randn(8, 2)),
     {}, TypeError, "up_weight is a nested tensor"),
    ("geglu_mlp", lambda: (randn(2, 8), randn(12, 8), randn(12, 8), torch.nested.nested_tensor([randn(12)] * 8)),
     {}, TypeError, "down_weight is a nested tensor"),
    ("geglu_down_proj", lambda: (randn(3, 4), randn(3, 4), randn(5, 3)), {}, ValueError, "down_weight must be [hidden, 4]"),
    ("geglu_down_proj", lambda: (randn(3, 4), randn(3, 4), randn(5, 4), randn(4)), {}, ValueError, "down_bias must have shape (5,)"),
    ("geglu_down_proj", lambda: (randn(3, 4), randn(3, 4), randn(5, 4).half()), {}, TypeError, "down_weight must have gate's dtype"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("name, make_args, kwargs, error, message", BAD_INPUTS, ids=[b[-1] for b in BAD_INPUTS])
def test_bad_inputs_get_clear_errors(kernel, name, make_args, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        getattr(kernel, name)(*make_args(), **kwargs)


def test_out_in_its_inputs_memory_gets_eager_result(kernel):
    """out over x's own gate half, or interleaved with x in one buffer: x is read whole before out is written,
    so out holds what a separate out would."""
    for function in (kernel.gelu_and_mul, kernel.gelu_tanh_and_mul):
        x = randn(4, 8)
        expected = function(torch.empty(4, 4), x.clone())
        function(x[:, :4], x)
        assert torch.equal(x[:, :4], expected)
        buffer = randn(4, 12)
        expected = function(torch.empty(4, 4), buffer[:, :8].clone())
        function(buffer[:, 8:], buffer[:, :8])
        assert torch.equal(buffer[:, 8:], expected)


@pytest.mark.parametrize("requires_grad", ["out", "x"])
def test_gelu_and_mul_refuses_what_would_lose_a_gradient(kernel, requires_grad):
    """As eager's out= functions: in grad mode neither tensor may require grad; under no_grad it writes."""
    out, x = torch.empty(3, 2), randn(3, 4)
    {"out": out, "x": x}[requires_grad].requires_grad_()
    with pytest.raises(ValueError, match="gelu_and_mul writes into out and records no gradient"):
        kernel.gelu_and_mul(out, x)
    with torch.no_grad():
        kernel.gelu_and_mul(out, x)
    assert rel_error(out, torch.nn.functional.gelu(x[:, :2]) * x[:, 2:]) <= 1e-6


def test_gelu_and_mul_counts_its_write_as_eager_out_functions_do(kernel):
    """out's version counter moves, so autograd refuses a backward that saved out's old values (it read the
    overwritten ones silently); an inference tensor is written only in inference mode, as eager's are."""
    for function in (kernel.gelu_and_mul, kernel.gelu_tanh_and_mul):
        leaf, out, x = randn(3, 2).requires_grad_(), torch.zeros(3, 2), randn(3, 4)
        product = (leaf * out).sum()  # saves out for leaf's gradient
        with torch.no_grad():
            function(out, x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            product.backward()
        with torch.inference_mode():
            inference_out = torch.empty(3, 2)
        with pytest.raises(ValueError, match="out is an inference tensor"):
            function(inference_out, x)
        with torch.inference_mode():
            assert torch.equal(function(inference_out, x), function(torch.empty(3, 2), x))


def _every_function_on(kernel, make):
    """Each public function on tensors from ``make(*shape)``, its result's shape and dtype; backward where differentiable."""
    gate, up, x = make(3, 5, 20).requires_grad_(), make(3, 5, 20), make(3, 5, 40).requires_grad_()
    weight, down_weight, bias = make(20, 8), make(8, 20).requires_grad_(), make(8)
    results = {
        "geglu": kernel.geglu(gate, up),
        "geglu_concat": kernel.geglu_concat(x, approximate="none"),
        "geglu_linear": kernel.geglu_linear(make(3, 8), weight, weight, make(20), None),
        "geglu_mlp": kernel.geglu_mlp(make(3, 8), weight, weight, make(8, 20), None, None, make(8)),
        "geglu_down_proj": kernel.geglu_down_proj(gate, up, down_weight, bias),
        "gelu_and_mul": kernel.gelu_and_mul(make(3, 5, 20), x.detach()),
    }
    (results["geglu"].sum() + results["geglu_concat"].sum() + results["geglu_down_proj"].sum()).backward()
    grads = (gate.grad, x.grad, down_weight.grad)
    return {name: (tuple(out.shape), out.dtype) for name, out in results.items()}, grads


EXPECTED_SHAPES = {
    "geglu": (3, 5, 20),
    "geglu_concat": (3, 5, 20),
    "geglu_linear": (3, 20),
    "geglu_mlp": (3, 8),
    "geglu_down_proj": (3, 5, 8),
    "gelu_and_mul": (3, 5, 20),
}


def _plain_mlp_operands(device):
    x, gate_weight, up_weight = randn(2, 16, device=device), randn(24, 16, device=device), randn(24, 16, device=device)
    return [x, gate_weight, up_weight, randn(16, 24, device=device), None, None, None]


def _negated(tensor):
    """The tensor's values as a lazily negated view (a real view of a complex tensor's negated imaginary part)."""
    view = torch.complex(torch.zeros_like(tensor), -tensor).conj().imag
    assert view.is_neg()
    return view


PLAIN_MLP_EXCLUSIONS = {  # each call geglu_mlp must send down its general path: (change to the operands, context)
    "a bias": (lambda ops: ops.__setitem__(6, randn(16, device=ops[0].device)), None),
    "float64 x": (lambda ops: ops.__setitem__(0, ops[0].double()), None),
    "x of another width": (lambda ops: ops.__setitem__(0, randn(2, 8, device=ops[0].device)), None),
    "a meta x": (lambda ops: ops.__setitem__(0, ops[0].to("meta")), None),
    "a negated weight": (lambda ops: ops.__setitem__(3, _negated(ops[3])), None),
    "x requiring grad": (lambda ops: ops[0].requires_grad_(), None),
    "autocast": (None, lambda device: torch.autocast(device.split(":")[0], dtype=torch.bfloat16)),
    "forward-mode AD": (None, lambda device: torch.autograd.forward_ad.dual_level()),
}


@pytest.mark.parametrize("exclusion", [None, *PLAIN_MLP_EXCLUSIONS])
def test_only_the_plain_inference_mlp_call_skips_the_general_path(kernel, device, exclusion):
    """geglu_mlp's one-pass test for its common call (no biases, plain well-formed tensors, nothing to record or
    cast) is True for that call and False for each call the general path must see."""
    operands = _plain_mlp_operands(device)
    change, context = PLAIN_MLP_EXCLUSIONS.get(exclusion, (None, None))
    if change is not None:
        change(operands)
    with context(device) if context is not None else contextlib.nullcontext():
        plain = kernel.functional._is_plain_inference_mlp(*operands, "tanh")
    assert plain is (exclusion is None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_meta_tensors_go_through_the_ops(kernel, dtype):
    """Shape propagation (torch.device("meta") model init): shapes and dtypes, forward and backward, no data."""
    results, grads = _every_function_on(kernel, lambda *shape: torch.empty(shape, device="meta", dtype=dtype))
    assert results == {name: (shape, dtype) for name, shape in EXPECTED_SHAPES.items()}
    assert [g.shape for g in grads] == [(3, 5, 20), (3, 5, 40), (8, 20)] and all(g.is_meta for g in grads)


def _negated_memory(t: torch.Tensor) -> torch.Tensor:
    """t's values in a lazily negated view (``is_neg()``) of memory that holds -t: what ``z.conj().imag`` gives."""
    return torch._neg_view(-t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_lazily_negated_tensors_give_what_their_values_give(kernel, device, dtype):
    """The kernels read memory as it is; a negated view must still count as its values, in every argument: forward,
    out=, and gradients through it."""
    make = lambda *shape: randn(*shape, dtype=dtype, device=device)  # noqa: E731
    calls = {
        "geglu": (kernel.geglu, (make(3, 20), make(3, 20))),
        "geglu_concat": (kernel.geglu_concat, (make(3, 40),)),
        # one token: the decode GEMMs where the device's tables have them
        "geglu_linear": (kernel.geglu_linear, (make(1, 8), make(20, 8), make(20, 8), make(20), make(20))),
        "geglu_mlp": (kernel.geglu_mlp, (make(1, 8), make(20, 8), make(20, 8), make(8, 20), None, None, make(8))),
        "geglu_down_proj": (kernel.geglu_down_proj, (make(3, 20), make(3, 20), make(8, 20), make(8))),
    }
    for name, (function, args) in calls.items():
        expected = function(*args)
        for i, arg in enumerate(args):
            if arg is not None:
                negated = args[:i] + (_negated_memory(arg),) + args[i + 1 :]
                assert torch.equal(function(*negated), expected), (name, i)
    x = make(3, 40)
    expected = kernel.gelu_and_mul(torch.empty(3, 20, dtype=dtype, device=device), x)
    assert torch.equal(kernel.gelu_and_mul(torch.empty(3, 20, dtype=dtype, device=device), _negated_memory(x)), expected)
    out = _negated_memory(torch.empty(3, 20, dtype=dtype, device=device))
    assert torch.equal(kernel.gelu_and_mul(out, x), expected) and out.is_neg()

    leaves = [make(*shape).requires_grad_() for shape in ((3, 8), (20, 8), (20, 8), (8, 20))]
    kernel.geglu_mlp(*leaves).sum().backward()
    expected_grads = [leaf.grad for leaf in leaves]
    for i in range(len(leaves)):
        for leaf in leaves:
            leaf.grad = None
        args = [_negated_memory(leaf) if j == i else leaf for j, leaf in enumerate(leaves)]
        kernel.geglu_mlp(*args).sum().backward()
        # A negated operand takes the registered op's path (see functional._needs_registered_op): the projections'
        # own autograd, which sums x's two gradient products as eager does, rounding twice where the one-step MLP
        # rounds once (and may pick other GEMM kernels on a GPU). A sign lost would be a relative error near 2.
        for leaf, grad in zip(leaves, expected_grads):
            assert rel_error(leaf.grad, grad) <= MLP_REL_TOL[dtype], i


def test_fake_tensor_mode_goes_through_the_ops(kernel, device):
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        results, grads = _every_function_on(kernel, lambda *shape: torch.empty(shape, device=device, dtype=torch.bfloat16))
    assert results == {name: (shape, torch.bfloat16) for name, shape in EXPECTED_SHAPES.items()}
    assert all(isinstance(g, FakeTensor) for g in grads)


@pytest.mark.parametrize("name, approximate", [("gelu_and_mul", "none"), ("gelu_tanh_and_mul", "tanh")])
def test_activation_drop_ins_compile_fullgraph(kernel, device, name, approximate):
    """The out= drop-ins under torch.compile(fullgraph=True): no data_ptr() read while tracing."""

    def forward(x):
        out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
        return getattr(kernel, name)(out, x) * 2

    compiled = compile_fullgraph(forward, device)
    x = randn(3, 2 * 24, device=device)
    assert rel_error(compiled(x), 2 * geglu64(x[:, :24], x[:, 24:], approximate)) <= 1e-6
    assert torch._dynamo.explain(forward)(x).graph_break_count == 0


def _run_isolated(build_dir, code: str, prelude: str = "") -> str:
    """Load the build in a fresh interpreter without TRITON_INTERPRET, run ``code``, return its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = prelude + f"import pathlib, kernels, torch\nkernel = kernels.get_local_kernel(pathlib.Path({str(build_dir)!r}))\n"
    result = subprocess.run(
        [sys.executable, "-c", script + code], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


CHECK_AGAINST_EAGER = textwrap.dedent(
    """
    import torch.nn.functional as F
    gate, up = torch.randn(4, 300), torch.randn(4, 300)
    out = kernel.geglu(gate, up, approximate="none")
    assert torch.equal(out, F.gelu(gate) * up), "forward differs from eager"
    gate.requires_grad_(); up.requires_grad_()
    kernel.geglu(gate, up).sum().backward()
    g2, u2 = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    (F.gelu(g2, approximate="tanh") * u2).sum().backward()
    assert torch.allclose(gate.grad.double(), g2.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(up.grad.double(), u2.grad, rtol=1e-5, atol=1e-6)
    # The MLP's training path (geglu_down_proj): bf16 gradients as eager's.
    gate, up = (torch.randn(6, 40, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    weight = torch.randn(8, 40, dtype=torch.bfloat16, requires_grad=True)
    grads = torch.autograd.grad(kernel.geglu_down_proj(gate, up, weight).sum(), (gate, up, weight))
    eager_grads = torch.autograd.grad(F.linear(F.gelu(gate, approximate="tanh") * up, weight).sum(), (gate, up, weight))
    assert all(torch.allclose(a, b, rtol=1e-2, atol=1e-2) for a, b in zip(grads, eager_grads))
    """
)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU fallback is for CPU-only machines")
def test_cpu_without_interpreter_uses_the_pytorch_path(build_dir):
    code = CHECK_AGAINST_EAGER + "print('triton' if kernel.ops._runs_on_triton(gate) else 'fallback')"
    assert _run_isolated(build_dir, code).strip() == "fallback"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the torch-cpu variant is what a CPU torch loads")
def test_cpu_variant_imports_without_triton(build_dir):
    hide_triton = "import sys\nsys.modules['triton'] = None  # makes `import triton` fail\n"
    code = "assert kernel.ops.triton_kernels is None\n" + CHECK_AGAINST_EAGER
    _run_isolated(build_dir, code, prelude=hide_triton)
