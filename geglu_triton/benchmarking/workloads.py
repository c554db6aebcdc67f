"""The measured cells: the activation forward, forward+backward, and the whole GeGLU MLP.

Byte models: the fewest bytes a cell must move through device memory (each
input read once, each output written once); e is the element size,
n = tokens x intermediate, T tokens, H hidden, I intermediate.

- activation forward: read gate and up, write out: 3 n e;
- activation forward+backward: the forward, then read gate, up and grad_out
  and write grad_gate and grad_up: 8 n e;
- MLP forward: read x and the three weights, write out: e (3 H I + 2 T H);
- MLP forward+backward: also read grad_out, write grad_x and the three weight
  gradients: e (6 H I + 4 T H).

FLOP models: the activation's arithmetic is not counted (it is memory-bound);
the MLP's three projections are 2 T H I each: 6 T H I forward, 18 T H I with
the backward.

Floors: bytes over the copy bandwidth measured in the same run; for the MLP
the larger of that and FLOPs over the measured matmul rate. ``pct_of_floor``
is floor / time: 100 means the implementation runs at the floor.

Each implementation in a cell runs: a first call (torch.compile compiles
here, Triton JIT-compiles or loads from its cache), a checked call (outputs
compared with float64, peak memory measured, on output memory poisoned with
NaN beforehand so unwritten elements show), then the timed calls, rotating
among input sets. Failures are recorded in the cell, and the run goes on.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch

from . import accuracy, implementations
from .grid import (
    ACTIVATION_FORWARD,
    ACTIVATION_FORWARD_BACKWARD,
    MLP_FORWARD,
    MLP_FORWARD_BACKWARD,
    Grid,
    MLPModel,
    dtype_name,
)
from .implementations import COMPILE, LIGER, OURS_CONCAT, Unavailable
from .modules import GemmaStyleMLP
from .timing import CopyCeiling, Deadline, MatmulCeiling, Timer, input_set_count, peak_memory_of_call, synchronize

BYTE_MODEL = {
    ACTIVATION_FORWARD: "read gate, read up, write out: 3 * tokens * intermediate * element_size",
    ACTIVATION_FORWARD_BACKWARD: (
        "forward bytes + read gate, up, grad_out + write grad_gate, grad_up: 8 * tokens * intermediate * element_size"
    ),
    MLP_FORWARD: "read x and the 3 weights, write out: element_size * (3*H*I + 2*T*H); FLOPs 6*T*H*I",
    MLP_FORWARD_BACKWARD: (
        "forward + read grad_out, write grad_x and the 3 weight gradients: element_size * (6*H*I + 4*T*H); "
        "FLOPs 18*T*H*I"
    ),
}

#: Every input view starts on this boundary, as fresh allocations do (the
#: kernels vectorize on aligned pointers; so do eager's and Inductor's).
ALIGN_BYTES = 512
#: Failure messages are kept to this length in the results.
MAX_REASON_CHARS = 600


@dataclass
class Context:
    """What every cell needs: the device and its ceilings, the timer, the kernel, the limits."""

    device: torch.device
    timer: Timer
    kernel: object
    grid: Grid
    copy: CopyCeiling
    matmul: MatmulCeiling
    memory_budget_bytes: int
    deadline: Deadline


@dataclass
class Measurement:
    """One implementation in one cell. ``status``: "ok", "skipped" or "failed" (``reason`` says why)."""

    status: str
    reason: Optional[str] = None
    median_us: Optional[float] = None
    #: Host time to queue one timed repetition (the call, the L2 flush, two events): above median_us, host-bound.
    host_us_per_rep: Optional[float] = None
    tb_per_s: Optional[float] = None
    pct_copy_bandwidth: Optional[float] = None
    pct_of_floor: Optional[float] = None
    tflop_per_s: Optional[float] = None
    peak_bytes: Optional[int] = None
    rel_errors: dict = field(default_factory=dict)
    within_tolerance: Optional[bool] = None
    first_call_s: Optional[float] = None
    graphs_compiled: Optional[int] = None
    recompiles_while_timing: Optional[int] = None


def failure_text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def _aligned_elements(count: int, dtype: torch.dtype) -> int:
    per_slot = max(1, ALIGN_BYTES // torch.empty((), dtype=dtype).element_size())
    return -(-count // per_slot) * per_slot


def _random_views(
    sets: int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, requires_grad: bool
) -> list[torch.Tensor]:
    """``sets`` tensors of N(0, 1) values of ``shape``, carved from one allocation at aligned offsets."""
    numel = math.prod(shape)
    pool = torch.randn(sets, _aligned_elements(numel, dtype), dtype=dtype, device=device)
    views = pool[:, :numel].view(sets, *shape).unbind(0)
    if requires_grad:
        for view in views:
            view.requires_grad_()
    return list(views)


class Rotation:
    """Which input set the next timed call uses: 0, 1, ..., sets - 1, 0, ..."""

    def __init__(self, sets: int) -> None:
        self.sets = sets
        self.next = 0

    def advance(self) -> int:
        index = self.next
        self.next = (index + 1) % self.sets
        return index


class CellBench:
    """One cell: its inputs, how each implementation runs on them, and how outputs are checked."""

    workload: str
    implementations: tuple[str, ...]

    def __init__(self, ctx: Context, dtype: torch.dtype, approximate: str, backward: bool) -> None:
        self.ctx = ctx
        self.dtype = dtype
        self.approximate = approximate
        self.backward = backward
        self.element_size = torch.empty((), dtype=dtype).element_size()

    # What the subclasses say about the cell.
    def describe(self) -> dict:
        raise NotImplementedError

    def title(self) -> str:
        raise NotImplementedError

    @property
    def bytes_moved(self) -> int:
        raise NotImplementedError

    @property
    def flops(self) -> Optional[int]:
        return None

    def bytes_per_input_set(self) -> int:
        raise NotImplementedError

    def memory_bytes(self, sets: int) -> int:
        """Device memory the cell's inputs (all sets) and one call's outputs take."""
        raise NotImplementedError

    def allocate(self, sets: int) -> None:
        raise NotImplementedError

    def skip_reason(self, name: str) -> Optional[str]:
        return None

    def build(self, name: str) -> Callable:
        raise NotImplementedError

    def step(self, fn: Callable, name: str, index: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def checked_inputs(self, name: str, index: int):
        """What ``errors`` needs to know about input set ``index``, taken before the checked call."""
        return None

    def errors(self, name: str, checked_inputs, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        raise NotImplementedError

    def tolerances(self) -> dict[str, float]:
        raise NotImplementedError

    def refresh(self, name: str) -> Optional[Callable[[int], None]]:
        """For implementations that overwrite their inputs: draw fresh values into set ``index``."""
        return None

    def release(self) -> None:
        """Drop the cell's tensors (its inputs, its module)."""
        raise NotImplementedError

    # The metrics every cell derives the same way.
    @property
    def floor_s(self) -> float:
        floor = self.bytes_moved / self.ctx.copy.bytes_per_s
        if self.flops:
            floor = max(floor, self.flops / self.ctx.matmul.flop_per_s)
        return floor

    def metrics(self, seconds: float) -> dict:
        bytes_per_s = self.bytes_moved / seconds
        return {
            "median_us": seconds * 1e6,
            "tb_per_s": bytes_per_s / 1e12,
            "pct_copy_bandwidth": 100 * bytes_per_s / self.ctx.copy.bytes_per_s,
            "pct_of_floor": 100 * self.floor_s / seconds,
            "tflop_per_s": self.flops / seconds / 1e12 if self.flops else None,
        }


def _allocation_sizes(tensors) -> list[int]:
    """Bytes of the allocations behind ``tensors``, one per storage (both halves of a grad_x count once).

    Measured as the extent the tensors reach into their storage, not the
    storage's size: an output that aliases an input pool (Liger's gradients)
    counts as what it covers.
    """
    extents: dict[int, int] = {}
    for t in tensors:
        last = t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
        key = t.untyped_storage().data_ptr()
        extents[key] = max(extents.get(key, 0), (last + 1) * t.element_size())
    return list(extents.values())


def _poison_free_memory(device: torch.device, nbytes: list[int]) -> None:
    """Fill and free blocks the size of each output, so that the caching allocator hands them out next.

    Best effort: an output that the implementation fails to write in full then
    holds NaN where it was not written, instead of the previous implementation's
    (correct) result of the same inputs.
    """
    poison = [torch.full((max(1, n // 4),), math.nan, dtype=torch.float32, device=device) for n in nbytes]
    synchronize(device)
    del poison


#: Timing rounds per cell: the implementations take turns this many times.
TIMING_ROUNDS = 3


@dataclass
class Prepared:
    """An implementation ready to be timed: its call, its per-repetition refresh, what was measured so far."""

    call: Callable[[], object]
    prepare: Optional[Callable[[], None]]
    measurement: Measurement


def _prepare(bench: CellBench, name: str, sets: int) -> Measurement | Prepared:
    """First call, then a checked call (accuracy, peak memory); a Measurement if it cannot be timed."""
    ctx = bench.ctx
    skip = bench.skip_reason(name)
    if skip is not None:
        return Measurement(status="skipped", reason=skip)
    try:
        fn = bench.build(name)
    except Unavailable as why:
        return Measurement(status="skipped", reason=str(why))
    refresh = bench.refresh(name)

    start = time.perf_counter()
    first = bench.step(fn, name, 0)
    synchronize(ctx.device)
    first_call_s = time.perf_counter() - start
    graphs = implementations.compiled_graph_count() if name == COMPILE else None
    output_sizes = _allocation_sizes(first.values())
    del first

    if refresh is not None:
        refresh(0)
    checked_inputs = bench.checked_inputs(name, 0)
    _poison_free_memory(ctx.device, output_sizes)
    outputs, peak = peak_memory_of_call(ctx.device, lambda: bench.step(fn, name, 0))
    errors = bench.errors(name, checked_inputs, outputs)
    del outputs, checked_inputs

    rotation = Rotation(sets)
    return Prepared(
        call=lambda: bench.step(fn, name, rotation.advance()),
        prepare=(lambda: refresh(rotation.next)) if refresh is not None else None,
        measurement=Measurement(
            status="ok",
            peak_bytes=peak,
            rel_errors=errors,
            within_tolerance=accuracy.within_tolerance(errors, bench.tolerances()),
            first_call_s=first_call_s,
            graphs_compiled=graphs,
        ),
    )


def _time_prepared(bench: CellBench, prepared: dict[str, Prepared]) -> dict[str, Measurement]:
    """Time the prepared implementations side by side, in alternating rounds; fill in their figures.

    If one of them fails while timed, each is timed alone instead, so that
    the failure is charged to the one that failed.
    """
    timer = bench.ctx.timer
    calls = {name: (p.call, p.prepare) for name, p in prepared.items()}
    try:
        timings: dict = timer.timings_interleaved(calls, rounds=TIMING_ROUNDS)
    except Exception:
        _release_device_memory(bench.ctx.device)
        timings = {}
        for name, call_and_prepare in calls.items():
            try:
                timings[name] = timer.timings_interleaved({name: call_and_prepare}, rounds=1)[name]
            except Exception as err:
                timings[name] = Measurement(status="failed", reason=f"while timed: {failure_text(err)}")
                _release_device_memory(bench.ctx.device)
    measured = {}
    for name, p in prepared.items():
        timing = timings[name]
        if isinstance(timing, Measurement):
            measured[name] = timing
            continue
        measurement = p.measurement
        for key, value in bench.metrics(timing.median_s).items():
            setattr(measurement, key, value)
        measurement.host_us_per_rep = timing.host_s_per_rep * 1e6
        if measurement.graphs_compiled is not None:
            measurement.recompiles_while_timing = implementations.compiled_graph_count() - measurement.graphs_compiled
        measured[name] = measurement
    return measured


def _release_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_cell(bench: CellBench) -> dict:
    """Every implementation on one cell: the cell's record for the results file."""
    ctx = bench.ctx
    record = {
        "title": bench.title(),
        "workload": bench.workload,
        **bench.describe(),
        "bytes": bench.bytes_moved,
        "flops": bench.flops,
        "floor_us": bench.floor_s * 1e6,
        "results": {},
        "speedups": {},
    }
    sets = input_set_count(ctx.device, bench.bytes_per_input_set())
    record["input_sets"] = sets
    cell_skip = skip_cause = None
    if ctx.deadline.exceeded():
        cell_skip, skip_cause = ctx.deadline.reason, "time"
    elif bench.memory_bytes(sets) > ctx.memory_budget_bytes:
        cell_skip, skip_cause = (
            (
                f"inputs and outputs need {bench.memory_bytes(sets) / 2**30:.1f} GiB, over the memory budget "
                f"of {ctx.memory_budget_bytes / 2**30:.1f} GiB (--memory-budget-gib)"
            ),
            "memory",
        )
    if cell_skip is not None:
        record["skipped"], record["skip_cause"] = cell_skip, skip_cause
        record["results"] = {
            name: asdict(Measurement(status="skipped", reason=cell_skip)) for name in bench.implementations
        }
        return record

    try:
        bench.allocate(sets)
    except Exception as err:  # out of memory, most likely: the whole cell fails, the run goes on
        failure = Measurement(status="failed", reason=f"allocating the inputs: {failure_text(err)}")
        record["results"] = {name: asdict(failure) for name in bench.implementations}
    else:
        results: dict[str, Measurement] = {}
        prepared: dict[str, Prepared] = {}
        for name in bench.implementations:
            try:
                outcome = _prepare(bench, name, sets)
            except Exception as err:
                outcome = Measurement(status="failed", reason=failure_text(err))
            if isinstance(outcome, Prepared):
                prepared[name] = outcome
                continue
            if outcome.status == "failed":  # after the except block: its traceback held the tensors
                _release_device_memory(ctx.device)
            results[name] = outcome
        results.update(_time_prepared(bench, prepared))
        record["results"] = {name: asdict(results[name]) for name in bench.implementations}
    bench.release()
    _release_device_memory(ctx.device)
    record["speedups"] = speedups(record["results"])
    return record


def speedups(results: dict[str, dict]) -> dict[str, dict[str, float]]:
    """For each of our implementations that ran: baseline time / our time, per baseline that ran (>1: ours faster)."""
    table = {}
    for ours in implementations.OUR_IMPLEMENTATIONS:
        if results.get(ours, {}).get("status") != "ok":
            continue
        table[ours] = {
            base: results[base]["median_us"] / results[ours]["median_us"]
            for base in implementations.BASELINES
            if results.get(base, {}).get("status") == "ok"
        }
    return table


class ActivationBench(CellBench):
    """``gelu(gate) * up`` on [tokens, intermediate] inputs, forward or forward+backward."""

    implementations = implementations.ACTIVATION_IMPLEMENTATIONS

    def __init__(self, ctx, tokens: int, intermediate: int, dtype, approximate: str, backward: bool) -> None:
        super().__init__(ctx, dtype, approximate, backward)
        self.workload = ACTIVATION_FORWARD_BACKWARD if backward else ACTIVATION_FORWARD
        self.tokens = tokens
        self.intermediate = intermediate
        self.numel = tokens * intermediate

    def describe(self) -> dict:
        return {
            "dtype": dtype_name(self.dtype),
            "approximate": self.approximate,
            "tokens": self.tokens,
            "intermediate": self.intermediate,
        }

    def title(self) -> str:
        return f"{self.workload} {dtype_name(self.dtype)} {self.approximate} {self.tokens}x{self.intermediate}"

    @property
    def bytes_moved(self) -> int:
        return (8 if self.backward else 3) * self.numel * self.element_size

    def bytes_per_input_set(self) -> int:
        # What one call reads: gate and up (or x), and grad_out.
        return (3 if self.backward else 2) * self.numel * self.element_size

    def memory_bytes(self, sets: int) -> int:
        # Per set: gate, up, x (twice their size) and grad_out; per call: out and both gradients.
        per_set = (5 if self.backward else 4) * self.numel * self.element_size
        outputs = (3 if self.backward else 1) * self.numel * self.element_size
        return sets * per_set + outputs

    def allocate(self, sets: int) -> None:
        shape, device = (self.tokens, self.intermediate), self.ctx.device
        self.gate = _random_views(sets, shape, self.dtype, device, self.backward)
        self.up = _random_views(sets, shape, self.dtype, device, self.backward)
        self.x = _random_views(sets, (self.tokens, 2 * self.intermediate), self.dtype, device, self.backward)
        self.grad_out = _random_views(sets, shape, self.dtype, device, False) if self.backward else None

    def skip_reason(self, name: str) -> Optional[str]:
        if name == COMPILE and not self.ctx.grid.compiles(self.dtype, self.tokens, self.intermediate):
            return "outside the compile sub-grid for this dtype (each static shape costs a fresh compile; see grid.py)"
        return None

    def build(self, name: str) -> Callable:
        return implementations.activation(name, self.approximate, self.ctx.kernel, self.ctx.device)

    def _halves(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[..., : self.intermediate], x[..., self.intermediate :]

    def step(self, fn: Callable, name: str, index: int) -> dict[str, torch.Tensor]:
        inputs = (self.x[index],) if name == OURS_CONCAT else (self.gate[index], self.up[index])
        out = fn(*inputs)
        if not self.backward:
            return {"out": out}
        grads = torch.autograd.grad(out, inputs, self.grad_out[index])
        grad_gate, grad_up = self._halves(grads[0]) if name == OURS_CONCAT else grads
        return {"out": out, "grad_gate": grad_gate, "grad_up": grad_up}

    def _overwrites_inputs(self, name: str) -> bool:
        """Liger's backward stores the gradients into gate's and up's memory."""
        return name == LIGER and self.backward

    def checked_inputs(self, name: str, index: int):
        gate, up = self._halves(self.x[index]) if name == OURS_CONCAT else (self.gate[index], self.up[index])
        if self._overwrites_inputs(name):  # keep what the call was given
            return gate.detach().clone(), up.detach().clone()
        return gate.detach(), up.detach()

    def errors(self, name: str, checked_inputs, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        gate, up = checked_inputs
        return accuracy.activation_errors(
            gate,
            up,
            self.approximate,
            outputs["out"],
            self.grad_out[0] if self.backward else None,
            outputs.get("grad_gate"),
            outputs.get("grad_up"),
        )

    def tolerances(self) -> dict[str, float]:
        return accuracy.activation_tolerances(self.dtype)

    def refresh(self, name: str) -> Optional[Callable[[int], None]]:
        if not self._overwrites_inputs(name):
            return None

        def draw_fresh_inputs(index: int) -> None:
            with torch.no_grad():
                self.gate[index].normal_()
                self.up[index].normal_()

        return draw_fresh_inputs

    def release(self) -> None:
        self.gate = self.up = self.x = self.grad_out = None


class MLPBench(CellBench):
    """A Gemma-style GeGLU MLP (no bias) on [tokens, hidden] inputs, forward or forward+backward."""

    implementations = implementations.MLP_IMPLEMENTATIONS
    GRADIENTS = ("grad_x", "grad_gate_proj", "grad_up_proj", "grad_down_proj")

    def __init__(self, ctx, model: MLPModel, tokens: int, dtype, approximate: str, backward: bool) -> None:
        super().__init__(ctx, dtype, approximate, backward)
        self.workload = MLP_FORWARD_BACKWARD if backward else MLP_FORWARD
        self.model = model
        self.tokens = tokens
        self._reference = None

    def describe(self) -> dict:
        return {
            "dtype": dtype_name(self.dtype),
            "approximate": self.approximate,
            "tokens": self.tokens,
            "model": self.model.name,
            "hidden": self.model.hidden,
            "intermediate": self.model.intermediate,
        }

    def title(self) -> str:
        return f"{self.workload} {dtype_name(self.dtype)} {self.approximate} {self.model.name} x{self.tokens}"

    @property
    def _weight_elements(self) -> int:
        return 3 * self.model.hidden * self.model.intermediate

    @property
    def _activation_elements(self) -> int:
        return self.tokens * self.model.hidden

    @property
    def bytes_moved(self) -> int:
        if self.backward:
            return self.element_size * (2 * self._weight_elements + 4 * self._activation_elements)
        return self.element_size * (self._weight_elements + 2 * self._activation_elements)

    @property
    def flops(self) -> int:
        return (18 if self.backward else 6) * self.tokens * self.model.hidden * self.model.intermediate

    def bytes_per_input_set(self) -> int:
        # Every call reads the (shared) weights and its own x and grad_out.
        return self.element_size * (self._weight_elements + (2 if self.backward else 1) * self._activation_elements)

    def memory_bytes(self, sets: int) -> int:
        weights = self.element_size * self._weight_elements * (2 if self.backward else 1)
        intermediates = self.element_size * 3 * self.tokens * self.model.intermediate
        per_set = self.element_size * self._activation_elements * (2 if self.backward else 1)
        return weights + intermediates + sets * per_set

    def allocate(self, sets: int) -> None:
        device = self.ctx.device
        self.module = GemmaStyleMLP(
            self.model.hidden, self.model.intermediate, approximate=self.approximate, device=device, dtype=self.dtype
        )
        self.module.requires_grad_(self.backward)
        shape = (self.tokens, self.model.hidden)
        self.x = _random_views(sets, shape, self.dtype, device, self.backward)
        self.grad_out = _random_views(sets, shape, self.dtype, device, False) if self.backward else None

    @property
    def _weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.module.gate_proj.weight, self.module.up_proj.weight, self.module.down_proj.weight

    def build(self, name: str) -> Callable:
        return implementations.mlp(name, self.module, self.approximate, self.ctx.kernel, self.ctx.device)

    def step(self, fn: Callable, name: str, index: int) -> dict[str, torch.Tensor]:
        out = fn(self.x[index])
        if not self.backward:
            return {"out": out}
        grads = torch.autograd.grad(out, (self.x[index], *self._weights), self.grad_out[index])
        return {"out": out, **dict(zip(self.GRADIENTS, grads))}

    def errors(self, name: str, checked_inputs, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        if self._reference is None:  # float64 GEMMs: computed once per cell, on input set 0
            self._reference = accuracy.mlp_reference(
                self.x[0], self._weights, self.approximate, self.grad_out[0] if self.backward else None
            )
        return {name: accuracy.rel_error(outputs[name], self._reference[name]) for name in outputs}

    def tolerances(self) -> dict[str, float]:
        return {name: accuracy.MLP_REL_TOL[self.dtype] for name in ("out", *self.GRADIENTS)}

    def release(self) -> None:
        self.module = self.x = self.grad_out = self._reference = None


def activation_cells(ctx: Context, dtype: torch.dtype, workloads: tuple[str, ...]) -> list[CellBench]:
    """The activation cells of one dtype, in the order they run."""
    grid = ctx.grid
    return [
        ActivationBench(ctx, tokens, intermediate, dtype, approximate, backward)
        for backward, workload in ((False, ACTIVATION_FORWARD), (True, ACTIVATION_FORWARD_BACKWARD))
        if workload in workloads
        for approximate in grid.approximations
        for tokens in grid.tokens
        for intermediate in grid.intermediates
    ]


def mlp_cells(ctx: Context, workloads: tuple[str, ...]) -> list[CellBench]:
    grid = ctx.grid
    return [
        MLPBench(ctx, model, tokens, dtype, approximate, backward)
        for backward, workload in ((False, MLP_FORWARD), (True, MLP_FORWARD_BACKWARD))
        if workload in workloads
        for dtype in grid.mlp_dtypes
        for approximate in grid.approximations
        for model, tokens in grid.mlp_cells
    ]
