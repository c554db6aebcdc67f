"""CUDA graphs: kernelized MLPs captured and replayed, as fast decode loops run them (GPU only).

At a batch of one, eager decoding is bound by the host (docs/PERFORMANCE.md),
so users who want tokens/s capture the step in a CUDA graph, by hand or
through torch.compile's "reduce-overhead" mode. A replay runs the captured
launches on whatever the static inputs hold by then, with no Python at all:
these tests check that every fused path (the decode GEMM, its plain form for
the down projection at one token, the mid-size GEMM, the activation kernel
beside cuBLAS) replays on new data exactly as it runs eagerly, and that
torch.compile's CUDA graphs take the kernels in.
"""

from __future__ import annotations

import pytest
import torch

from geglu_triton.benchmarking.accuracy import MLP_REL_TOL, MODEL_LOGITS_REL_TOL
from geglu_triton.benchmarking.modules import GemmaStyleMLP, fused_forward
from geglu_triton.benchmarking.timing import capture_graph
from reference import rel_error
from tiny_models import tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")

#: Gemma3 1B's MLP: small weights, so the fused GEMM serves from 1 token up to its mid class.
HIDDEN, INTERMEDIATE = 1152, 6912
WEIGHT_BYTES = HIDDEN * INTERMEDIATE * 2


def _kernelized_mlp(kernel) -> GemmaStyleMLP:
    """A Gemma3-1B-sized MLP in bf16 with the layer's forward bound, as kernelize binds it."""
    torch.manual_seed(0)
    mlp = GemmaStyleMLP(HIDDEN, INTERMEDIATE, device="cuda", dtype=torch.bfloat16)
    mlp.forward = fused_forward(mlp, kernel)
    return mlp


@pytest.fixture
def launches(kernel, monkeypatch):
    """The launches of the GEMM kernel ("fused GEMM" gated, "plain GEMM" not) and of the activation kernel
    ("activation") made while the test runs."""
    made = []
    gemm, activation = kernel.triton_gemm_kernels, kernel.triton_kernels
    launch_gemm, launch_forward = gemm.launch_gemm, activation.launch_forward

    def gemm_counted(launch, *operands):
        made.append("fused GEMM" if dict(launch.options.constexprs)["GATED"] else "plain GEMM")
        return launch_gemm(launch, *operands)

    def activation_counted(*args, **kwargs):
        made.append("activation")
        return launch_forward(*args, **kwargs)

    monkeypatch.setattr(gemm, "launch_gemm", gemm_counted)
    monkeypatch.setattr(activation, "launch_forward", activation_counted)
    return made


@pytest.mark.parametrize("tokens", [1, 16, 64, 1024])
def test_a_captured_kernelized_mlp_replays_new_inputs_as_it_runs_eagerly(kernel, launches, tokens):
    mlp = _kernelized_mlp(kernel)
    static_x = torch.randn(1, tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
    static_out = None

    def step():
        nonlocal static_out
        static_out = mlp(static_x)

    # What the device's tables choose: the fused GEMM or cuBLAS and the activation kernel for the first half,
    # and our GEMM's plain form or cuBLAS for the down projection. The H100's and H200's class fuses up to 64.
    tables, device = kernel.device_tables, kernel.device_tables.describe_device(0)
    fused = tables.gemm_config(tokens, WEIGHT_BYTES, device) is not None
    assert fused or tokens > 64 or device.shared_memory < tables.SM90_SHARED_MEMORY
    expected = ["fused GEMM" if fused else "activation"] + ["plain GEMM"] * (
        tables.down_proj_gemm_config(tokens, WEIGHT_BYTES, device) is not None
    )
    with torch.no_grad():
        graph = capture_graph(step)
        assert launches == expected * 4  # three warm-up calls and the captured one
        for _ in range(3):
            static_x.copy_(torch.randn_like(static_x))
            graph.replay()
            replayed = static_out.clone()
            assert torch.equal(replayed, mlp(static_x))  # the same launches, the same bits
            assert rel_error(replayed, type(mlp).forward(mlp, static_x)) <= MLP_REL_TOL[torch.bfloat16]


def test_captured_activation_kernels_replay_new_inputs(kernel):
    gate, up = (torch.randn(16, INTERMEDIATE, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fused = torch.cat([gate, up], dim=-1)
    outs = {}

    def step():
        outs["geglu"] = kernel.geglu(gate, up, approximate="tanh")
        outs["geglu_concat"] = kernel.geglu_concat(fused, approximate="none")

    graph = capture_graph(step)
    for _ in range(3):
        for tensor in (gate, up, fused):
            tensor.normal_()
        graph.replay()
        assert torch.equal(outs["geglu"], kernel.geglu(gate, up, approximate="tanh"))
        assert torch.equal(outs["geglu_concat"], kernel.geglu_concat(fused, approximate="none"))


def test_reduce_overhead_compile_replays_the_kernels_without_python(kernel, launches):
    """torch.compile's CUDA graphs (mode="reduce-overhead") record the registered op's launches once: the later
    calls replay them, so no Python launch runs, and the output is the eager kernels' on each new input."""
    mlp = _kernelized_mlp(kernel)
    torch._dynamo.reset()
    compiled = torch.compile(mlp, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(1, 1, HIDDEN, device="cuda", dtype=torch.bfloat16)
    launched = []
    with torch.no_grad():
        for _ in range(6):
            x.normal_()
            before = len(launches)
            out = compiled(x).clone()
            launched.append(len(launches) - before)
            assert torch.equal(out, mlp(x))
    # The first calls (a warm-up run, a recording run) launch from Python; from the fourth on, replays do not.
    assert launched[0] > 0 and launched[3:] == [0, 0, 0], launched


def test_a_reduce_overhead_compiled_kernelized_model_keeps_eager_logits(kernel, launches):
    """A whole (tiny) Gemma3 under torch.compile(mode="reduce-overhead") runs its MLPs' kernels and keeps eager's
    logits. Which parts of the model inductor puts in CUDA graphs is its own choice: that the kernels replay is
    the MLP's test above."""
    original = tiny_model("gemma3").to("cuda", torch.bfloat16).eval()
    kernelized = tiny_model("gemma3").to("cuda", torch.bfloat16).eval()
    for layer in kernelized.model.layers:
        layer.mlp.forward = fused_forward(layer.mlp, kernel)
    torch._dynamo.reset()
    compiled = torch.compile(kernelized, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            input_ids = torch.randint(0, 128, (1, 12), device="cuda")
            logits = compiled(input_ids=input_ids, use_cache=False).logits.clone()
            expected = original(input_ids=input_ids, use_cache=False).logits
            assert rel_error(logits.float(), expected.float()) <= MODEL_LOGITS_REL_TOL[torch.bfloat16]
    assert launches  # the compiled model ran the kernels (its first call, at least, from Python)
