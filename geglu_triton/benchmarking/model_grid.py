"""What the model-level benchmark measures: the Gemma3 sizes and the plan of a run, one source of truth.

The sizes are the text decoders of Google's Gemma3 checkpoints, written down
once here from their published configs (``config.json`` of
``google/gemma-3-{1b,4b,12b,27b}-(pt|it)``, the text part for the multimodal
4B, 12B and 27B). Models are built from these with random weights; nothing is
downloaded. A run may build fewer layers than the checkpoint has (the default
plan does for 12B and 27B, to fit the time budget); every per-model figure
then comes with its per-layer form, and the report says how many layers ran.

Two plans: ``gpu`` (the default on a GPU: a time budget of 330 s, past which
what remains is skipped; a step under way finishes, so about six minutes on an
H200) and ``cpu`` (every run without a GPU: the ``tiny`` size only, a smoke
test of the same code path in well under a minute under ``TRITON_INTERPRET=1``;
``--models tiny`` gives the same smoke test on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch


@dataclass(frozen=True)
class Gemma3Size:
    """The dimensions of one Gemma3 text decoder."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    sliding_window: int
    #: Gemma3 scales queries by query_pre_attn_scalar**-0.5 (head_dim, except 27B: hidden / heads).
    query_pre_attn_scalar: int


GEMMA3_SIZES = {
    size.name: size
    for size in (
        Gemma3Size("1b", 1152, 6912, 4, 1, 256, 26, 262144, 512, 256),
        Gemma3Size("4b", 2560, 10240, 8, 4, 256, 34, 262208, 1024, 256),
        Gemma3Size("12b", 3840, 15360, 16, 8, 256, 48, 262208, 1024, 256),
        Gemma3Size("27b", 5376, 21504, 32, 16, 128, 62, 262208, 1024, 168),
        # Not a Gemma: the CPU smoke test's size (every part of the model, tiny).
        Gemma3Size("tiny", 32, 72, 2, 1, 16, 2, 128, 16, 16),
    )
}
#: Gemma3's MLP activation (``hidden_activation``), and the GELU form it is.
HIDDEN_ACTIVATION = "gelu_pytorch_tanh"
APPROXIMATE = "tanh"
DTYPE = torch.bfloat16

MLP = "mlp"
PREFILL = "prefill"
DECODE = "decode"
TRAINING = "training"
#: The parts measured for each model, in the order they run.
PARTS = (MLP, PREFILL, DECODE, TRAINING)


@dataclass(frozen=True)
class ModelPlan:
    """Everything one model-level run measures, and how long it may take."""

    name: str
    sizes: tuple[str, ...]
    #: Layers built per size where fewer than the checkpoint's (figures also per layer).
    layers: dict
    #: The MLP alone: token counts of one call (a [1, tokens, hidden] input, as the model passes it).
    mlp_tokens: tuple[int, ...]
    #: The prefill forward: a [1, prefill_tokens] prompt.
    prefill_tokens: int
    #: Decode: a [1, prompt_tokens] prompt, then new_tokens greedy tokens.
    prompt_tokens: int
    new_tokens: int
    #: Training step (forward and backward of the causal-LM loss) on [batch, sequence] tokens.
    training_sizes: tuple[str, ...]
    training_batch: int
    training_sequence: int
    #: Layers and vocabulary of the training models (see TRAINING_VOCAB_NOTE).
    training_layers: dict
    training_vocab: int
    #: Rounds in which the implementations take turns, for the wall-time loops. On a GPU both counts
    #: are multiples of the number of implementations, so that each runs in each place of the turning
    #: order (``timing.round_order``) equally often: with 3 rounds of 4, torch.compile never ran first
    #: and eager ran first once, in the round right after the checks.
    rounds: int
    #: Rounds for the whole model's figures (prefill, a decode step, a training step): one sample of
    #: each implementation per round, of its GPU time and of its wall time.
    model_rounds: int
    #: Timer settings (milliseconds, as triton.testing.do_bench takes them).
    warmup_ms: float
    rep_ms: float
    time_budget_s: float

    def layers_of(self, size: Gemma3Size, training: bool = False) -> int:
        table = self.training_layers if training else self.layers
        return min(size.layers, table.get(size.name, size.layers))


#: Why the training models have a smaller vocabulary than Gemma3's (formatted with the plan's).
TRAINING_VOCAB_NOTE = (
    "the training models use a {vocab}-token vocabulary (issue 15's setting is 32768), not Gemma3's 262k: with the "
    "real vocabulary the float32 logits and their gradient (8 GiB each at 8 x 1024 tokens) would dominate the peak and "
    "hide the MLP's share"
)

GPU_PLAN = ModelPlan(
    name="gpu",
    # 12B last: if the time budget runs out, the size least unlike its neighbours is the one left out.
    sizes=("1b", "4b", "27b", "12b"),
    layers={"12b": 16, "27b": 10},
    mlp_tokens=(1, 8, 16, 64, 256, 1024, 4096),
    prefill_tokens=1024,
    prompt_tokens=32,
    new_tokens=32,
    training_sizes=("1b", "4b", "tiny"),  # tiny: only when asked for, as a smoke test
    training_batch=8,
    training_sequence=1024,
    training_layers={},
    training_vocab=32768,
    rounds=4,
    model_rounds=4,
    warmup_ms=5,
    rep_ms=25,
    time_budget_s=330,
)

CPU_PLAN = ModelPlan(
    name="cpu",
    sizes=("tiny",),
    layers={"tiny": 1},
    mlp_tokens=(1, 4),
    prefill_tokens=8,
    prompt_tokens=4,
    new_tokens=2,
    training_sizes=("tiny",),
    training_batch=1,
    training_sequence=8,
    training_layers={"tiny": 1},
    training_vocab=128,
    rounds=1,
    model_rounds=1,
    warmup_ms=1,
    rep_ms=3,
    time_budget_s=120,
)


def plan_for(
    device_type: str,
    sizes: Optional[list[str]] = None,
    layers: Optional[int] = None,
    time_budget_s: Optional[float] = None,
) -> ModelPlan:
    """The plan of a run: the GPU plan with the sizes, layer count and budget asked for; on a CPU, the CPU plan."""
    if device_type == "cpu":
        plan = CPU_PLAN
        sizes = None  # only the tiny size runs without a GPU
    else:
        plan = GPU_PLAN
    changes: dict = {}
    if sizes:
        changes["sizes"] = tuple(sizes)
        changes["training_sizes"] = tuple(s for s in plan.training_sizes if s in sizes)
    if layers is not None:
        changes["layers"] = {name: layers for name in GEMMA3_SIZES}
        changes["training_layers"] = {name: layers for name in GEMMA3_SIZES}
    if time_budget_s is not None:
        changes["time_budget_s"] = time_budget_s
    return replace(plan, **changes)


def in_size_order(models: list[dict]) -> list[dict]:
    """Result records (with a ``size``) from the smallest Gemma3 to the largest, whatever order they ran in."""
    order = list(GEMMA3_SIZES)
    return sorted(models, key=lambda record: order.index(record["size"]))


def gemma3_config(size: Gemma3Size, layers: int, vocab: Optional[int] = None):
    """transformers' ``Gemma3TextConfig`` of ``size`` with ``layers`` layers (and another vocabulary if given)."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=vocab or size.vocab,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.head_dim,
        sliding_window=size.sliding_window,
        query_pre_attn_scalar=size.query_pre_attn_scalar,
        hidden_activation=HIDDEN_ACTIVATION,
        attn_implementation="sdpa",
    )


def build_model(
    size: Gemma3Size, layers: int, device: torch.device, *, vocab: Optional[int] = None, seed: int = 0
) -> torch.nn.Module:
    """A ``Gemma3ForCausalLM`` of ``size`` with random weights (transformers' own initialisation), in DTYPE.

    Built directly on ``device`` in DTYPE: a float32 model on the host first
    would need twice the memory and minutes for the larger sizes.
    """
    from transformers import Gemma3ForCausalLM

    config = gemma3_config(size, layers, vocab)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        with torch.device(device):
            model = Gemma3ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()
