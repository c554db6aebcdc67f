"""The kernelize-ready layers: GELU form read from the module, fallbacks, and kernelize itself."""

from __future__ import annotations

import contextlib
import types
import warnings
from unittest import mock

import pytest
import torch
import torch.nn as nn

from reference import randn, rel_error
from tiny_models import tiny_t5gemma_mlp

transformers_activations = pytest.importorskip("transformers.activations")


class GeGLUMLPModule(nn.Module):
    """A Gemma-style MLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))."""

    def __init__(self, act_fn=None, config=None, bias=False, hidden=16, intermediate=40):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        if act_fn is not None:
            self.act_fn = act_fn
        if config is not None:
            self.config = config

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _with_kernel_forward(module, layer_cls):
    module.forward = types.MethodType(layer_cls.forward, module)
    return module


@contextlib.contextmanager
def _counting_calls(module: nn.Module):
    """The calls of ``module``, counted by its class's forward (a hook on it would unfuse the MLP)."""
    calls, forward = [], type(module).forward

    def counted(self, *args, **kwargs):
        calls.append(1)
        return forward(self, *args, **kwargs)

    with mock.patch.object(type(module), "forward", counted):
        yield calls


ACTIVATIONS = [
    (lambda: transformers_activations.GELUTanh(), "tanh"),
    (lambda: transformers_activations.GELUTanh(use_gelu_tanh_python=True), "tanh"),
    (lambda: transformers_activations.NewGELUActivation(), "tanh"),
    (lambda: transformers_activations.FastGELUActivation(), "tanh"),
    (lambda: transformers_activations.AccurateGELUActivation(), "tanh"),
    (lambda: transformers_activations.GELUActivation(), "none"),
    (lambda: nn.GELU(), "none"),
    (lambda: nn.GELU(approximate="tanh"), "tanh"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("make_act, expected", ACTIVATIONS, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("bias", [False, True])
def test_geglu_mlp_follows_the_module_activation(kernel, make_act, expected, bias):
    module = GeGLUMLPModule(make_act(), bias=bias)
    assert kernel.layers.gelu_approximation(module) == expected
    x = randn(2, 5, 16).requires_grad_()
    reference = module(x)
    with _counting_calls(module.act_fn) as act_calls:
        fused = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
    assert not act_calls, "the fused path must not call the original activation"
    assert rel_error(fused, reference) <= 1e-5
    grads = torch.autograd.grad(fused.sum(), [x, *module.parameters()])
    reference_module = GeGLUMLPModule(make_act(), bias=bias)
    reference_module.load_state_dict(module.state_dict())
    reference_grads = torch.autograd.grad(reference_module(x).sum(), [x, *reference_module.parameters()])
    for ours, theirs in zip(grads, reference_grads):
        assert rel_error(ours, theirs) <= 1e-5


@pytest.mark.parametrize("projection", ["gate_proj", "up_proj", "down_proj"])
def test_a_projection_with_a_forward_of_its_own_is_called(kernel, projection):
    """accelerate's offloading binds a forward on the instance (its weight on the meta device until the hook
    brings it): such a projection is called, not read."""
    module = GeGLUMLPModule(nn.GELU(approximate="tanh"))
    linear = getattr(module, projection)
    weight = linear.weight.detach().clone()
    with torch.no_grad():
        linear.weight.zero_()  # what reading it directly would see; the bound forward holds the real one
    linear.forward = types.MethodType(lambda self, x: nn.functional.linear(x, weight, self.bias), linear)
    x = randn(3, 16)
    with torch.no_grad():
        reference = module(x)
        out = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
    assert rel_error(out, reference) <= 1e-5


@pytest.mark.parametrize("hook", ["forward", "backward"])
@pytest.mark.parametrize("projection", ["gate_proj", "up_proj", "down_proj"])
def test_hooks_on_a_projection_run_as_in_the_original_forward(kernel, projection, hook):
    """A projection with a forward or backward hook is called, not read: the hook runs once, the result unchanged."""
    module = GeGLUMLPModule(nn.GELU(approximate="tanh"))
    x = randn(3, 16).requires_grad_()
    reference = module(x)
    calls = []
    register = getattr(getattr(module, projection), "register_full_backward_hook" if hook == "backward" else "register_forward_hook")
    register(lambda *_: calls.append(1))
    out = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
    assert rel_error(out, reference) <= 1e-5
    out.sum().backward()
    assert calls == [1]


@pytest.mark.parametrize(
    "make_act", [nn.SiLU, nn.ReLU, transformers_activations.QuickGELUActivation]
)
def test_geglu_mlp_runs_other_activations_unfused(kernel, make_act):
    module = GeGLUMLPModule(make_act())
    assert kernel.layers.gelu_approximation(module) is None
    x = randn(3, 16)
    reference = module(x)
    with _counting_calls(module.act_fn) as act_calls:
        assert torch.equal(_with_kernel_forward(module, kernel.layers.GeGLUMLP)(x), reference)
    assert act_calls == [1]


@pytest.mark.parametrize("act_fn", [torch.nn.functional.gelu, torch.relu], ids=["F.gelu", "torch.relu"])
@pytest.mark.parametrize("set_on", ["instance", "class"])
def test_an_act_fn_that_is_a_function_runs_the_module_forward(kernel, act_fn, set_on):
    """Set on the instance or its class, a function is not in _modules: the config's tanh GELU was fused in its
    place (wrong by 1e-4 for F.gelu's exact form, by 8e-2 for relu)."""
    config = types.SimpleNamespace(hidden_activation="gelu_pytorch_tanh")
    if set_on == "instance":
        module = GeGLUMLPModule(config=config)
        module.act_fn = act_fn
    else:
        module = type("MLPWithActFnFunction", (GeGLUMLPModule,), {"act_fn": staticmethod(act_fn)})(config=config)
    x = randn(3, 16)
    reference = module(x)
    assert kernel.layers.gelu_approximation(module) is None
    assert torch.equal(_with_kernel_forward(module, kernel.layers.GeGLUMLP)(x), reference)


def test_gemma3n_mlps_with_activation_sparsity_run_their_own_forward(kernel):
    """Gemma 3n's MLP takes a Gaussian top-k of the gate before its GELU in its sparse layers: those run the
    original forward (the top-k included), the dense ones the fused path."""
    from transformers import Gemma3nTextConfig
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextMLP

    config = Gemma3nTextConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, activation_sparsity_pattern=[0.95, 0.0],
        hidden_activation="gelu_pytorch_tanh",
    )
    x = randn(3, 32)
    for layer, expected in ((0, None), (1, "tanh")):
        torch.manual_seed(layer)
        module = Gemma3nTextMLP(config, layer)
        assert kernel.layers.gelu_approximation(module) == expected
        with torch.no_grad():
            reference = module(x)
            ours = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
        assert rel_error(ours, reference) <= 1e-5, layer


@pytest.mark.parametrize(
    "mlp_training, dropout_training", [(False, False), (True, True), (False, True), (True, False)],
    ids=["eval", "train", "mc-dropout", "dropout-eval"],
)
def test_t5gemma_mlps_drop_out_as_their_own_forward_does(kernel, mlp_training, dropout_training):
    """T5Gemma's MLP drops out the GeGLU output: where its dropout is in training mode (also under an MLP in
    eval, as Monte Carlo dropout leaves it) that runs its own forward (the same mask for the same seed),
    elsewhere the fused path."""
    module = tiny_t5gemma_mlp().train(mlp_training)
    module.dropout.train(dropout_training)
    assert kernel.layers.gelu_approximation(module) == (None if dropout_training else "tanh")
    assert kernel.layers.activation_gelu_form(module) == "tanh"  # what the toolkit registers the class by
    x = randn(3, 32)
    with torch.no_grad():
        torch.manual_seed(1)
        reference = module(x)
        torch.manual_seed(1)
        ours = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
    assert rel_error(ours, reference) <= 1e-5


def test_what_the_kernels_would_not_compute_runs_the_module_forward(kernel):
    """A hook on act_fn, a GELU subclass with a forward of its own, and a projection whose weight is a plain
    attribute rather than a parameter: the result is the module's own (the fused path skipped the first two
    silently and raised KeyError on the third)."""
    class ClampedGELU(nn.GELU):
        def forward(self, x):
            return super().forward(x).clamp(max=0.1)

    hooked = GeGLUMLPModule(nn.GELU(approximate="tanh"))
    hooked.act_fn.register_forward_hook(lambda module, inputs, output: output * 0)
    subclassed = GeGLUMLPModule(ClampedGELU(approximate="tanh"))
    plain_weight = GeGLUMLPModule(nn.GELU(approximate="tanh"))
    weight = plain_weight.up_proj.weight.detach().clone()
    del plain_weight.up_proj.weight
    plain_weight.up_proj.weight = weight
    x = randn(3, 16)
    for module in (hooked, subclassed, plain_weight):
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the hooked one's (next test)
            reference = module(x)
            ours = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
        assert rel_error(ours, reference) <= 1e-6
    assert not hooked(x).any()


def test_a_hooked_activation_is_warned_of_once_per_class(kernel):
    """DeepSpeed ZeRO-3 hooks every module: its MLPs run unfused, and the user is told why, once."""
    class HookedMLP(GeGLUMLPModule):
        pass

    module = _with_kernel_forward(HookedMLP(nn.GELU(approximate="tanh")), kernel.layers.GeGLUMLP)
    module.act_fn.register_forward_pre_hook(lambda *_: None)
    x = randn(3, 16)
    with pytest.warns(RuntimeWarning, match="a HookedMLP whose act_fn has hooks runs its own forward, unfused"):
        module(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module(x)


def test_a_hooked_activation_under_torch_compile_is_warned_of_by_the_layer_alone(kernel):
    """Dynamo warns of every functools-cached function it traces; the once-per-class record must not be one."""
    class CompiledHookedMLP(GeGLUMLPModule):
        pass

    module = _with_kernel_forward(CompiledHookedMLP(nn.GELU(approximate="tanh")), kernel.layers.GeGLUMLP)
    module.act_fn.register_forward_hook(lambda *_: None)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="aot_eager")
    x = randn(3, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert torch.equal(compiled(x), type(module).forward(module, x))
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 1 and "a CompiledHookedMLP whose act_fn has hooks" in messages[0], messages


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_torch_export_keeps_the_kernels_as_ops_for_any_token_count(kernel, grad):
    """torch.export traces the layer as torch.compile does (the registered ops, by their fake implementations):
    the exported program holds our op, gives the module's own output, and with dynamic dimensions serves other
    shapes than the one traced."""
    module = _with_kernel_forward(GeGLUMLPModule(nn.GELU(approximate="tanh")), kernel.layers.GeGLUMLP)
    module.requires_grad_(grad)
    x = randn(2, 5, 16)
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens")
    exported = torch.export.export(module, (x,), dynamic_shapes=({0: batch, 1: tokens},))
    namespace = kernel._ops.add_op_namespace_prefix("").removesuffix("::")
    ops = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert any(op.startswith(f"{namespace}.") for op in ops), ops
    for shape in ((2, 5, 16), (3, 7, 16)):
        x = randn(*shape)
        assert rel_error(exported.module()(x), type(module).forward(module, x)) <= 1e-6


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")  # jit.trace's own
def test_forward_mode_ad_function_transforms_and_jit_tracing_run_the_module_forward(kernel):
    """The kernels refuse them (test_training); a kernelized MLP runs its own forward under them instead, so a
    jvp, a vmap or a torch.jit.trace through a kernelized model gives eager's result."""
    module = GeGLUMLPModule(nn.GELU(approximate="tanh"))
    kernelized = _with_kernel_forward(GeGLUMLPModule(nn.GELU(approximate="tanh")), kernel.layers.GeGLUMLP)
    kernelized.load_state_dict(module.state_dict())
    x, tangent = randn(3, 16), randn(3, 16)
    for ours, reference in zip(torch.func.jvp(kernelized, (x,), (tangent,)), torch.func.jvp(module, (x,), (tangent,))):
        assert torch.equal(ours, reference)
    assert torch.equal(torch.func.vmap(kernelized)(x), torch.func.vmap(module)(x))
    assert torch.equal(torch.jit.trace(kernelized, (x,))(x), module(x))


def test_the_layer_class_called_by_itself_is_a_type_error(kernel):
    """GeGLUMLP's unfused path is the forward of the module it is bound to; an instance of the layer class has
    none, and says so rather than recursing."""
    with pytest.raises(TypeError, match="GeGLUMLP has no forward of its own .* not a module to call by itself"):
        kernel.layers.GeGLUMLP()(randn(2, 16))


def test_a_dropout_without_a_rate_runs_the_module_forward(kernel):
    """A ``dropout`` submodule with no ``p`` (here nn.Identity) may drop anything: in training the module's own
    forward runs it, where reading ``p`` raised AttributeError."""
    module = GeGLUMLPModule(nn.GELU(approximate="tanh"))
    module.dropout = nn.Identity()
    assert kernel.layers.gelu_approximation(module) is None
    x = randn(3, 16)
    with torch.no_grad():
        assert torch.equal(_with_kernel_forward(module, kernel.layers.GeGLUMLP)(x), module(x))


@pytest.mark.parametrize("name, expected", [("gelu_pytorch_tanh", "tanh"), ("gelu", "none"), ("gelu_new", "tanh"), ("gelu_accurate", "tanh")])
def test_geglu_mlp_without_act_fn_reads_the_config(kernel, name, expected):
    """Liger's LigerGEGLUMLP naming: no act_fn, the activation named in config.hidden_act."""
    module = GeGLUMLPModule(config=types.SimpleNamespace(hidden_act=name))
    assert kernel.layers.gelu_approximation(module) == expected
    x = randn(4, 16)
    out = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
    expected_out = module.down_proj(
        torch.nn.functional.gelu(module.gate_proj(x), approximate=expected) * module.up_proj(x)
    )
    assert rel_error(out, expected_out) <= 1e-6


def _liger_forward(self, x):
    """LigerGEGLUMLP's forward as Liger defines it: the tanh GELU, whatever the config names."""
    gelu = torch.nn.functional.gelu(self.gate_proj(x), approximate="tanh")
    return self.down_proj(gelu * self.up_proj(x))


_liger_forward.__module__ = "liger_kernel.transformers.geglu"  # where Liger's forward lives (liger is not installed)


@pytest.mark.parametrize("name", ["gelu", "silu", None])
def test_liger_geglu_mlp_is_fused_in_the_tanh_form_its_forward_computes(kernel, name):
    """A Gemma 7B config names hidden_act "gelu"; LigerGEGLUMLP computes the tanh GELU all the same."""
    liger_mlp_class = type("LigerGEGLUMLP", (GeGLUMLPModule,), {"forward": _liger_forward})
    module = liger_mlp_class(config=types.SimpleNamespace(hidden_act=name))
    assert kernel.layers.gelu_approximation(module) == "tanh"
    x = randn(4, 16)
    reference = module(x)
    assert rel_error(_with_kernel_forward(module, kernel.layers.GeGLUMLP)(x), reference) <= 1e-6


class _ConfigActivationMLP(GeGLUMLPModule):
    """Liger's naming: no act_fn; its own forward applies the activation its config names (ReLU if none)."""

    def forward(self, x):
        name = self.config.hidden_act
        act = transformers_activations.ACT2FN[name] if name else torch.relu
        return self.down_proj(act(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("name", ["silu", "relu", None])
def test_geglu_mlp_without_act_fn_runs_the_original_forward_for_other_activations(kernel, name):
    """No act_fn and a config naming another activation, or none: the module's own forward runs, unfused."""
    module = _ConfigActivationMLP(config=types.SimpleNamespace(hidden_act=name))
    assert kernel.layers.gelu_approximation(module) is None
    x = randn(2, 16).requires_grad_()
    reference = module(x)
    out = _with_kernel_forward(module, kernel.layers.GeGLUMLP)(x)
    assert torch.equal(out, reference)
    out.sum().backward()
    assert x.grad is not None


def test_geglu_mlp_runs_what_the_kernels_do_not_take_as_eager_does(kernel):
    """float64 (gradcheck's dtype) runs the original forward: eager's result and gradients, so that
    torch.autograd.gradcheck passes on a kernelized model; a non-tensor gets eager's one-line error."""
    eager = GeGLUMLPModule(nn.GELU(approximate="tanh"), hidden=4, intermediate=6).double()
    module = _with_kernel_forward(GeGLUMLPModule(nn.GELU(approximate="tanh"), hidden=4, intermediate=6), kernel.layers.GeGLUMLP)
    module.load_state_dict(eager.state_dict())
    module.double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.equal(module(x), eager(x))
    assert torch.autograd.gradcheck(module, (x,))
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        module([[0.0] * 4])


def test_geglu_mlp_on_a_meta_device_model(kernel):
    """torch.device("meta") model init and shape propagation through the kernelized MLP, training and inference."""
    with torch.device("meta"):
        module = _with_kernel_forward(GeGLUMLPModule(nn.GELU(approximate="tanh"), bias=True), kernel.layers.GeGLUMLP)
        x = torch.empty(2, 5, 16, dtype=torch.float32)
    out = module(x)
    assert out.is_meta and out.shape == (2, 5, 16)
    out.sum().backward()
    assert all(p.grad.is_meta and p.grad.shape == p.shape for p in module.parameters())
    with torch.no_grad():
        assert module(x).shape == (2, 5, 16)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("name", ["GeGLUMLP", "GeluAndMul", "GeluTanhAndMul"])
def test_layers_are_kernelize_compliant(kernel, name):
    """kernelize's own rules: stateless, no extra members, declared capabilities."""
    from kernels.layer.layer import _validate_layer

    layer = getattr(kernel.layers, name)
    reference = GeGLUMLPModule if name == "GeGLUMLP" else transformers_activations.GELUActivation
    _validate_layer(check_cls=reference, cls=layer, repo=name)
    assert layer.has_backward is True and layer.can_torch_compile is True


@pytest.mark.parametrize("mode_name", ["INFERENCE", "TRAINING", "TRAINING_COMPILE"])
def test_kernelize_gemma3_mlp_from_the_local_build(build_dir, kernel, mode_name):
    from kernels import LocalLayerRepository, Mode, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP

    mode = {"INFERENCE": Mode.INFERENCE, "TRAINING": Mode.TRAINING, "TRAINING_COMPILE": Mode.TRAINING | Mode.TORCH_COMPILE}[
        mode_name
    ]
    replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")
    config = Gemma3TextConfig(hidden_size=32, intermediate_size=72, hidden_activation="gelu_pytorch_tanh")
    model = nn.Sequential(Gemma3MLP(config), Gemma3MLP(config))
    x = randn(2, 3, 32).requires_grad_()
    reference = model(x)
    repo = LocalLayerRepository(repo_path=build_dir, layer_name="GeGLUMLP")
    with use_kernel_mapping({"GeGLUMLP": {"cpu": repo, "cuda": repo}}, inherit_mapping=False):
        kernelize(model, mode=mode, device="cpu")
    assert all(m.forward.__func__ is kernel.layers.GeGLUMLP.forward for m in model)
    assert rel_error(model(x), reference) <= 1e-5
