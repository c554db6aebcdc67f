"""Timing on the benchmark device: medians, the device's two ceilings, peak memory.

The timer follows ``triton.testing.do_bench``'s method: one call to warm up,
five to estimate the time, warm-up calls for ``warmup_ms``, then repetitions
for ``rep_ms``, each preceded by a write over a buffer larger than the L2
cache and timed alone between two CUDA events; the result is the median.
It adds two things do_bench lacks: an untimed ``prepare`` before each
repetition (Liger's backward overwrites its inputs; ``prepare`` draws fresh
ones), and timing the implementations of a cell in alternating rounds
(``timings_interleaved``), so that device drift does not favour whichever
runs first. Like ``timeit``, it turns the garbage collector off while timing.
And it queues each batch of repetitions behind a GPU spin long enough for
the host to get ahead (``_let_host_get_ahead``), so that a cell's figure is
GPU time even where a call costs more host time than GPU time; the host
side of a call is measured apart (``bench``'s host section).
On a CPU the same loop runs with ``time.perf_counter``.

Callers also rotate among several input sets when one fits in the L2 cache
(``input_set_count``), so that no repetition reads what the last one left
in the cache even before the flush.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

import torch

#: do_bench's repetition bounds, and ours: at least a few samples for the
#: median, at most enough to keep tiny kernels from taking seconds of events.
MIN_REPS = 5
MAX_REPS = 500
#: The L2 flush writes this many bytes (do_bench: 256 MB), or 4x the L2 if larger.
FLUSH_BYTES = 256 * 2**20
#: The GPU spin queued before a batch of repetitions lasts this many times the
#: batch's host time (measured per repetition while estimating): the margin
#: covers a host slower during the batch than during the estimate.
HOST_LEAD_MARGIN = 2.0
#: Input sets of one cell together exceed this multiple of the L2 cache.
ROTATION_L2_MULTIPLE = 3
MAX_INPUT_SETS = 16384
#: Where the device does not say (and on a CPU, nominally), the cache size to rotate past.
DEFAULT_GPU_L2_BYTES = 60 * 2**20
CPU_CACHE_BYTES = 2 * 2**20


@contextmanager
def garbage_collector_paused():
    """Python's garbage collector off for the block, as ``timeit`` turns it off while timing."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


#: A host-loop round's calls (at most five kernels each: 500 launches, inside CUDA's launch queue of ~1000).
HOST_LOOP_CALLS = 100
#: The spin that keeps the GPU busy through a host-loop round: this many seconds at 2 GHz or less.
HOST_LOOP_SPIN_S = 0.1


def host_us_per_call(fn: Callable[[], object]) -> float:
    """One host-loop round: the host's time per call of ``fn``, behind a GPU spin so that it never waits for the GPU."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(HOST_LOOP_SPIN_S * 2e9))
    start = time.perf_counter()
    for _ in range(HOST_LOOP_CALLS):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / HOST_LOOP_CALLS * 1e6


def fastest_host_rounds(cases: dict, rounds: int) -> dict:
    """Each case's fastest host-loop round (name -> (fn, a context manager factory to run it in)), the cases in
    turns after 20 warm-up calls each (compiles, caches): slower rounds are other processes' doing."""
    for fn, setting in cases.values():
        with setting():
            for _ in range(20):
                fn()
    best = {name: float("inf") for name in cases}
    with garbage_collector_paused():
        for _ in range(rounds):
            for name, (fn, setting) in cases.items():
                with setting():
                    best[name] = min(best[name], host_us_per_call(fn))
    return best


def median_host_us(fn: Callable[[], object], before: Callable[[], object], samples: int) -> float:
    """The median host time of ``samples`` calls of ``fn``, each timed alone (perf_counter_ns) right after an
    untimed ``before()``: a call as it runs after other code (cold), or after nothing (``lambda: None``, warm)."""
    times = []
    for _ in range(samples):
        before()
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def l2_cache_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or DEFAULT_GPU_L2_BYTES)
    return CPU_CACHE_BYTES


def input_set_count(device: torch.device, bytes_per_set: int) -> int:
    """How many input sets a cell rotates among: enough that together they exceed 3x the L2 cache."""
    wanted = math.ceil(ROTATION_L2_MULTIPLE * l2_cache_bytes(device) / max(bytes_per_set, 1))
    return max(1, min(MAX_INPUT_SETS, wanted))


def gpu_work(fn: Callable[[], object], device: torch.device) -> list:
    """The kernels (and memsets, copies) one ``fn()`` runs on a CUDA device, as torch.profiler records them."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # no CPU ops: fewer events to parse
        fn()
        synchronize(device)
    return [event for event in prof.events() if event.device_type == DeviceType.CUDA]


def capture_graph(fn: Callable[[], object]) -> "torch.cuda.CUDAGraph":
    """``fn``'s launches captured in a CUDA graph, after warm-up calls on a side stream (as torch.cuda.graphs advises).

    Replaying the graph runs the same kernels with no host work between
    them: its time is the GPU's alone, launch gaps included.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compiles, JITs and allocator warm-up happen here, not in the capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


@dataclass(frozen=True)
class Timing:
    """One callable's figures: its median time per repetition, and the host time a repetition took to queue.

    On a GPU the first is GPU time (the host is kept ahead); the second is
    what the host spent per repetition (any refresh, the L2 flush, two events
    and the call). Where the second exceeds the first, a loop of such calls
    in eager mode would run at the host's pace, not the GPU's.
    """

    median_s: float
    host_s_per_rep: float


def round_order(names: list, round_index: int) -> list:
    """The order of round ``round_index`` of implementations timed in turns: each round starts one later than
    the last, so that none always runs first (after the idle time between cells) or always last in a round
    (where a GPU under long GEMMs has clocked down most; v29: a 27B cell whose CUDA-graph replay put ours
    behind eager while its wall time put it ahead, ours always second of four)."""
    start = round_index % len(names) if names else 0
    return names[start:] + names[:start]


class Timer:
    """Median seconds of a callable on one device (see the module docstring for the method)."""

    def __init__(self, device: torch.device, warmup_ms: float, rep_ms: float) -> None:
        self.device = device
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self._flush_buffer = None
        self._spin_cycles_per_s = 0.0
        if device.type == "cuda":
            flush_bytes = max(FLUSH_BYTES, 4 * l2_cache_bytes(device))
            self._flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
            self._spin_cycles_per_s = self._measure_spin_rate()

    def _measure_spin_rate(self) -> float:
        """GPU clock cycles per second of ``torch.cuda._sleep``, the spin kernel that keeps the host ahead."""
        cycles = 20_000_000
        torch.cuda._sleep(cycles)  # first launch, and the clocks up
        start = self._mark()
        torch.cuda._sleep(cycles)
        end = self._mark()
        synchronize(self.device)
        return cycles / self._seconds_between(start, end)

    def _let_host_get_ahead(self, reps: int, host_s_per_rep: float) -> None:
        """Queue a GPU spin long enough for the host to queue ``reps`` repetitions behind it.

        A CUDA-event time is the GPU's only while the GPU never waits for the
        host. Where a call's host time exceeds its GPU time (small cells,
        Python-launched kernels, autograd), the GPU would idle between the
        two events and the figure would mix in host time, by an amount that
        varies with the host's load from run to run. Behind the spin the
        whole batch is queued before the first repetition starts, so every
        figure is GPU time; host time is reported apart (the host section).
        """
        if self._spin_cycles_per_s:
            torch.cuda._sleep(int(HOST_LEAD_MARGIN * reps * host_s_per_rep * self._spin_cycles_per_s))

    @property
    def method(self) -> str:
        if self.device.type == "cuda":
            return (
                f"CUDA events around each call, L2 flushed before each, each batch queued behind a GPU spin of "
                f"{HOST_LEAD_MARGIN:g}x its host time (so GPU time, not host time), median; "
                f"warm-up {self.warmup_ms} ms, repetitions for {self.rep_ms} ms ({MIN_REPS}..{MAX_REPS})"
            )
        return (
            f"time.perf_counter around each call, median; warm-up {self.warmup_ms} ms, repetitions for {self.rep_ms} ms"
        )

    def _mark(self):
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _seconds_between(self, start, end) -> float:
        if self.device.type == "cuda":
            return start.elapsed_time(end) / 1e3
        return end - start

    def _flush(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()

    def median_s(self, fn: Callable[[], object], prepare: Optional[Callable[[], None]] = None) -> float:
        return self.timings_interleaved({None: (fn, prepare)}, rounds=1)[None].median_s

    def _repetitions(self, fn: Callable[[], object], prepare: Optional[Callable[[], None]]) -> tuple[int, float]:
        """One untimed call, a five-call estimate, warm-up calls for warmup_ms.

        Returns how many repetitions fill rep_ms, and the host seconds one
        repetition takes to queue (refresh, flush, events, the call).
        """
        if prepare is not None:
            prepare()
        fn()
        synchronize(self.device)
        host_start = time.perf_counter()
        start = self._mark()
        for _ in range(5):
            if prepare is not None:
                prepare()
            self._flush()
            fn()
        end = self._mark()
        host_s_per_rep = (time.perf_counter() - host_start) / 5
        synchronize(self.device)
        estimate_ms = max(self._seconds_between(start, end) / 5 * 1e3, 1e-6)
        for _ in range(max(1, int(self.warmup_ms / estimate_ms))):
            fn()
        return max(MIN_REPS, min(MAX_REPS, int(self.rep_ms / estimate_ms))), host_s_per_rep

    def _timed(
        self, fn: Callable[[], object], prepare: Optional[Callable[[], None]], reps: int, host_s_per_rep: float
    ) -> list[float]:
        self._let_host_get_ahead(reps, host_s_per_rep)
        marks = []
        for _ in range(reps):
            if prepare is not None:
                prepare()
            self._flush()
            start = self._mark()
            fn()
            marks.append((start, self._mark()))
        synchronize(self.device)
        return [self._seconds_between(s, e) for s, e in marks]

    def host_s(self, fn: Callable[[], object]) -> float:
        """Seconds the host spends in one ``fn()`` with the GPU kept ahead: no wait on the GPU counted.

        ``fn`` runs once to estimate its host time, then again queued behind
        a GPU spin of HOST_LEAD_MARGIN times that estimate, so that it never
        waits for the GPU; on a CPU it is simply timed. ``fn`` should queue
        fewer launches than the device's launch queue holds (about a thousand).
        """
        synchronize(self.device)
        start = time.perf_counter()
        fn()
        estimate = time.perf_counter() - start
        synchronize(self.device)
        self._let_host_get_ahead(1, estimate)
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        synchronize(self.device)
        return seconds

    def kernel_s(self, fn: Callable[[], object]) -> float:
        """GPU seconds of one ``fn()``: the sum of the kernels (and copies) it ran, as torch.profiler records them.

        For a whole model's forward or training step, where CUDA events behind
        a spin do not give GPU time: transformers' forward reads a value on
        the host before its layers run (the causal mask's packed-sequence
        check), which waits for the spin, so the layers' launches are queued
        at the host's pace and the GPU waits for them in between. The sum of
        the kernels' own times leaves those waits out, and the launch gaps
        too (about a microsecond per kernel). On a CPU, the call's wall time.
        """
        if self.device.type != "cuda":
            return self.wall_s(fn)
        return sum(event.time_range.elapsed_us() for event in gpu_work(fn, self.device)) / 1e6

    def wall_s(self, fn: Callable[[], object]) -> float:
        """Wall seconds of one ``fn()`` to a synchronized result: the host's time or the GPU's, whichever bounds it."""
        synchronize(self.device)
        start = time.perf_counter()
        fn()
        synchronize(self.device)
        return time.perf_counter() - start

    def timings_interleaved(self, calls: dict, rounds: int) -> dict[object, Timing]:
        """The Timing of each ``name: (fn, prepare)``, their repetitions taken in alternating rounds.

        Implementations timed one after another see the device drift between
        them (clocks and power under minutes of GEMMs): in rounds, each of
        them samples the whole span, so their ratios do not inherit the drift,
        and the order turns each round (``round_order``). Python's garbage
        collector is off meanwhile, as ``timeit`` turns it off: a collection
        over a cell's thousands of input tensors would stall the host in the
        middle of a repetition and, where a call's host time is not hidden
        behind the GPU's, be charged to it.
        """
        with garbage_collector_paused():
            plans = {name: self._repetitions(fn, prepare) for name, (fn, prepare) in calls.items()}
            samples: dict = {name: [] for name in calls}
            for round_index in range(rounds):
                for name in round_order(list(calls), round_index):
                    fn, prepare = calls[name]
                    reps, host_s_per_rep = plans[name]
                    samples[name] += self._timed(fn, prepare, -(-reps // rounds), host_s_per_rep)
        return {name: Timing(statistics.median(samples[name]), plans[name][1]) for name in calls}


@dataclass(frozen=True)
class CopyCeiling:
    """Bytes read plus written per second by a large device-to-device copy."""

    bytes_copied: int
    seconds: float

    @property
    def bytes_per_s(self) -> float:
        return 2 * self.bytes_copied / self.seconds


@dataclass(frozen=True)
class MatmulCeiling:
    """FLOP per second of one large square matrix product on random data."""

    n: int
    dtype: str
    seconds: float

    @property
    def flop_per_s(self) -> float:
        return 2 * self.n**3 / self.seconds


def measure_copy_ceiling(timer: Timer, nbytes: int) -> CopyCeiling:
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=timer.device)
    dst = torch.empty_like(src)
    seconds = timer.median_s(lambda: dst.copy_(src))
    return CopyCeiling(bytes_copied=nbytes, seconds=seconds)


def measure_matmul_ceiling(timer: Timer, n: int, dtype: torch.dtype, dtype_label: str) -> MatmulCeiling:
    a = torch.randn(n, n, device=timer.device, dtype=dtype)
    b = torch.randn(n, n, device=timer.device, dtype=dtype)
    seconds = timer.median_s(lambda: a @ b)
    return MatmulCeiling(n=n, dtype=dtype_label, seconds=seconds)


def peak_memory_of_call(device: torch.device, fn: Callable[[], object]) -> tuple[object, Optional[int]]:
    """``fn()``'s result and the device memory it needed beyond what was allocated before (None on a CPU).

    The peak of ``torch.cuda.max_memory_allocated`` after a reset, less the
    allocation before the call: outputs, saved activations and temporaries.
    """
    if device.type != "cuda":
        return fn(), None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    synchronize(device)
    return result, torch.cuda.max_memory_allocated(device) - before


class Deadline:
    """The run's time budget: past it, remaining cells are skipped with a reason instead of run."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._start = time.perf_counter()

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start

    def exceeded(self) -> bool:
        return self.elapsed_s() > self.budget_s

    @property
    def reason(self) -> str:
        return f"the run's time budget of {self.budget_s:.0f} s was spent (raise it with --time-budget-s)"
