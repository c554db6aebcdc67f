"""Does the timer's L2 flush cost the small forward cells their constant few microseconds?

Between 84 and 216 MB the activation forward sits 6-8 us above bytes / copy
bandwidth, torch.compile's kernel as much as ours; from 336 MB on it reaches
94-104%. The hypothesis (docs/PERFORMANCE.md, v5): the flush before each
repetition *writes* 256 MB (``zero_``, as ``triton.testing.do_bench`` does),
so the timed kernel starts with an L2 full of dirty lines, whose write-back
it pays. A constant cost, invisible at gigabytes, a tenth of the time at 100 MB.

The probe times, for the cells in question and a large control cell, under
two flushes: the bench's write flush, and a read flush (a sum over the same
buffer, which leaves the L2 holding clean lines):

    copy      a device-to-device copy that moves the cell's bytes (reads
              and writes 3 tensors' worth: 1.5 tensors copied)
    ours      kernel.geglu(gate, up)
    compile   torch.compile(F.gelu(gate, approximate="tanh") * up)

If the hypothesis holds, the read flush takes the constant off all three
alike, and ours over a same-bytes copy is close to 1 under both flushes.

    python benchmarks/l2_flush_probe.py --kernel-dir build --out l2_flush.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from geglu_triton.benchmarking.environment import load_kernel, utc_now, versions
from geglu_triton.benchmarking.implementations import COMPILE, OURS, activation
from geglu_triton.benchmarking.timing import Timer, input_set_count

#: (tokens, intermediate) in bf16: the forward cells below 90% of copy in
#: 2026-12-03-h200-spin, one that holds (4096 x 16384), and a large control.
CELLS = ((1024, 14336), (1024, 16384), (1024, 24576), (4096, 4231), (8192, 4231), (4096, 16384), (16384, 16384))
DTYPE = torch.bfloat16


class ReadFlushTimer(Timer):
    """The bench's timer with its L2 flush reading the flush buffer instead of writing it."""

    def _flush(self) -> None:
        self._flush_buffer.sum()


def _time_cell(timer: Timer, kernel, tokens: int, intermediate: int) -> dict:
    shape = (tokens, intermediate)
    tensor_bytes = tokens * intermediate * DTYPE.itemsize
    sets = input_set_count(timer.device, 3 * tensor_bytes)
    inputs = [(torch.randn(shape, device="cuda", dtype=DTYPE), torch.randn(shape, device="cuda", dtype=DTYPE))]
    inputs += [tuple(t.clone() for t in inputs[0]) for _ in range(sets - 1)]
    copy_src = torch.randn(3 * tensor_bytes // 2 // 2, device="cuda", dtype=DTYPE)
    copy_dst = torch.empty_like(copy_src)
    functions = {name: activation(name, "tanh", kernel, timer.device) for name in (OURS, COMPILE)}
    rotation = [0]

    def rotated(fn):
        def call():
            rotation[0] = (rotation[0] + 1) % sets
            return fn(*inputs[rotation[0]])

        return call

    calls = {name: (rotated(fn), None) for name, fn in functions.items()}
    calls["copy"] = (lambda: copy_dst.copy_(copy_src), None)
    timings = timer.timings_interleaved(calls, rounds=3)
    micros = {name: t.median_s * 1e6 for name, t in timings.items()}
    return {
        "tokens": tokens,
        "intermediate": intermediate,
        "bytes_moved": 3 * tensor_bytes,
        "median_us": micros,
        "ours_over_copy": micros[OURS] / micros["copy"],
        "compile_over_copy": micros[COMPILE] / micros["copy"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    kernel = load_kernel(args.kernel_dir).module
    timers = {"write flush (zero_)": Timer(torch.device("cuda"), 25, 100)}
    timers["read flush (sum)"] = ReadFlushTimer(torch.device("cuda"), 25, 100)
    report = {
        "gpu": torch.cuda.get_device_name(),
        "versions": versions(),
        "date": utc_now().isoformat(timespec="seconds"),
        "dtype": "bf16",
        "runs": {},
    }
    for flush, timer in timers.items():
        rows = []
        for tokens, intermediate in CELLS:
            row = _time_cell(timer, kernel, tokens, intermediate)
            rows.append(row)
            us = row["median_us"]
            print(
                f"{flush:20s} {tokens:6d} x {intermediate:6d} ({row['bytes_moved'] / 1e6:6.0f} MB): "
                f"copy {us['copy']:8.1f}  ours {us[OURS]:8.1f}  compile {us[COMPILE]:8.1f} us; "
                f"ours / copy {row['ours_over_copy']:.3f}, compile / copy {row['compile_over_copy']:.3f}",
                flush=True,
            )
        report["runs"][flush] = rows
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
