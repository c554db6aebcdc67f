"""Whole-model decode, eager MLPs against kernelized ones, with the order of turns and the garbage collector varied.

``bench --models`` found the kernelized 1B model decoding 0.83-0.87x eager's
tokens/s while its MLP alone costs less host time than eager's. This probe
runs the static-cache decode loop of ``bench --models`` on the same model,
alternating which implementation goes first in a round, with the garbage
collector on and paused, and counts collections, to tell an effect of the
layer from one of the measurement. Beside each round's tokens/s it records
the main thread's CPU time per new token (``time.thread_time`` around the
whole call, the prompt's prefill included): decode is host-bound, so that
work is what a token costs, and unlike wall time it leaves out any time the
thread spent waiting for a CPU.

    python benchmarks/decode_probe.py --kernel-dir build --out decode_probe.json
"""

from __future__ import annotations

import gc
import json
import statistics
import time

import torch

from geglu_triton.benchmarking.environment import utc_now, versions
from geglu_triton.benchmarking.model_probes import eager_and_ours, probe_parser
from geglu_triton.benchmarking.model_workloads import static_decode
from geglu_triton.benchmarking.timing import garbage_collector_paused

ROUNDS = 10
NEW_TOKENS = 32


def main() -> None:
    parser = probe_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    model, forwards, device = eager_and_ours(args)
    prompt = torch.randint(model.config.vocab_size, (1, 32), device=device)
    samples = {f"{name}, gc {mode}": [] for name in forwards.available for mode in ("on", "paused")}
    cpu_ms_per_token = {key: [] for key in samples}
    collections = dict.fromkeys(samples, 0)
    with torch.no_grad():
        for name in forwards.available:
            forwards.use(name)
            static_decode(model, prompt, NEW_TOKENS, device)
        for round_index in range(ROUNDS):
            order = forwards.available if round_index % 2 == 0 else forwards.available[::-1]
            for mode in ("on", "paused"):
                for name in order:
                    forwards.use(name)
                    before = sum(stat["collections"] for stat in gc.get_stats())
                    cpu_start = time.thread_time()
                    if mode == "paused":
                        with garbage_collector_paused():
                            seconds = static_decode(model, prompt, NEW_TOKENS, device)[1]
                    else:
                        seconds = static_decode(model, prompt, NEW_TOKENS, device)[1]
                    key = f"{name}, gc {mode}"
                    cpu_ms_per_token[key].append((time.thread_time() - cpu_start) / NEW_TOKENS * 1e3)
                    collections[key] += sum(stat["collections"] for stat in gc.get_stats()) - before
                    samples[key].append(NEW_TOKENS / seconds)
    result = {
        "what": __doc__.splitlines()[0],
        "size": args.size,
        "new_tokens": NEW_TOKENS,
        "date": utc_now().isoformat(timespec="seconds"),
        "versions": versions(),
        "tokens_per_s": samples,
        "median_tokens_per_s": {key: statistics.median(values) for key, values in samples.items()},
        "gc_collections": collections,
        "thread_cpu_ms_per_token": cpu_ms_per_token,
        "median_thread_cpu_ms_per_token": {key: statistics.median(values) for key, values in cpu_ms_per_token.items()},
    }
    for key, values in samples.items():
        print(
            f"{key:20s} tokens/s median {statistics.median(values):6.1f}  rounds {[round(v, 1) for v in values]}  "
            f"gc collections {collections[key]}  thread CPU ms/token median "
            f"{statistics.median(cpu_ms_per_token[key]):6.2f}"
        )
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
