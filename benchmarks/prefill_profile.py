"""Where a whole-model prefill spends its host time: eager's MLPs against the kernelized ones.

Builds a Gemma3 text model (``model_grid.build_model``, random weights),
switches its MLPs between eager and ours (kernelized, as ``bench --models``
does) and, for each, profiles a few 1024-token prefills with torch.profiler:
the CPU ops by self time and call count, per forward. Also times the
prefill's wall time in alternating rounds. Prints two tables per
implementation and writes them as JSON.

    python benchmarks/prefill_profile.py --kernel-dir build --out prefill_profile.json [--size 1b]
"""

from __future__ import annotations

import json
import time

import torch

from geglu_triton.benchmarking.environment import utc_now, versions
from geglu_triton.benchmarking.model_probes import probe_model, probe_parser
from geglu_triton.benchmarking.timing import synchronize

FORWARDS = 3
ROUNDS = 5
TOP = 25


def main() -> None:
    parser = probe_parser(__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    args = parser.parse_args()
    model, forwards, device = probe_model(args)
    ids = torch.randint(model.config.vocab_size, (1, args.tokens), device=device)

    def prefill() -> None:
        model(input_ids=ids, use_cache=False, logits_to_keep=1)

    result = {
        "size": args.size,
        "tokens": args.tokens,
        "versions": versions(),
        "date": utc_now().isoformat(),
        "wall_ms": {},
    }
    with torch.no_grad():
        for name in forwards.available:
            forwards.use(name)
            for _ in range(3):
                prefill()
        walls = {name: [] for name in forwards.available}
        for _ in range(ROUNDS):
            for name in forwards.available:
                forwards.use(name)
                synchronize(device)
                start = time.perf_counter()
                prefill()
                synchronize(device)
                walls[name].append((time.perf_counter() - start) * 1e3)
        for name in forwards.available:
            result["wall_ms"][name] = sorted(walls[name])
            print(f"{name}: wall ms per prefill {sorted(walls[name])}")
        for name in forwards.available:
            forwards.use(name)
            with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU]
                + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
            ) as prof:
                for _ in range(FORWARDS):
                    prefill()
                synchronize(device)
            rows = []
            for event in prof.key_averages():
                rows.append(
                    {
                        "name": event.key,
                        "calls_per_forward": event.count / FORWARDS,
                        "self_cpu_us_per_forward": event.self_cpu_time_total / FORWARDS,
                        "cpu_us_per_forward": event.cpu_time_total / FORWARDS,
                        "device_us_per_forward": getattr(event, "self_device_time_total", 0) / FORWARDS,
                    }
                )
            rows.sort(key=lambda r: -r["self_cpu_us_per_forward"])
            result[name] = rows
            print(f"\n== {name}: CPU ops by self time per forward (top {TOP})")
            for r in rows[:TOP]:
                print(
                    f"{r['name'][:60]:60s} calls {r['calls_per_forward']:7.1f} self {r['self_cpu_us_per_forward']:9.1f} us "
                    f"total {r['cpu_us_per_forward']:9.1f} us gpu {r['device_us_per_forward']:8.1f} us"
                )
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
