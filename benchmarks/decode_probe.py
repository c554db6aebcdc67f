"""Whole-model decode, eager MLPs against kernelized ones, with the order of turns and the garbage collector varied.

``bench --models`` found the kernelized 1B model decoding 0.83-0.87x eager's
tokens/s while its MLP alone costs less host time than eager's. This probe
runs the static-cache decode loop of ``bench --models`` on the same model,
alternating which implementation goes first in a round, with the garbage
collector on and paused, and counts collections, to tell an effect of the
layer from one of the measurement.

    python benchmarks/decode_probe.py --kernel-dir build --out decode_probe.json
"""

from __future__ import annotations

import gc
import json
import statistics

import torch

from geglu_triton.benchmarking.environment import utc_now, versions
from geglu_triton.benchmarking.model_probes import eager_and_ours, probe_parser
from geglu_triton.benchmarking.model_workloads import static_decode
from geglu_triton.benchmarking.timing import garbage_collector_paused

ROUNDS = 4
NEW_TOKENS = 32


def main() -> None:
    parser = probe_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    model, forwards, device = eager_and_ours(args)
    prompt = torch.randint(model.config.vocab_size, (1, 32), device=device)
    samples = {f"{name}, gc {mode}": [] for name in forwards.available for mode in ("on", "paused")}
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
                    if mode == "paused":
                        with garbage_collector_paused():
                            seconds = static_decode(model, prompt, NEW_TOKENS, device)[1]
                    else:
                        seconds = static_decode(model, prompt, NEW_TOKENS, device)[1]
                    key = f"{name}, gc {mode}"
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
    }
    for key, values in samples.items():
        print(
            f"{key:20s} tokens/s median {statistics.median(values):6.1f}  rounds {[round(v, 1) for v in values]}  "
            f"gc collections {collections[key]}"
        )
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
