"""The parts of a model-level run: the MLP alone, prefill, decode and a training step.

Every part runs each implementation on one model (``ModelForwards.use``
switches the MLPs' forwards), checks it against eager's result on a fixed
input, then times them side by side: the Timer takes its repetitions in
alternating rounds, and so do the wall-time loops. Inputs are drawn afresh
before every timed repetition (random token ids, N(0, 1) MLP inputs).

Figures, where the device is a GPU:

- device time: GPU time. The MLP's by replaying a CUDA graph of one call per
  layer (each layer its own weights, as the model holds them); the whole
  model's (prefill, a decode step, a training step) as the sum of the
  kernels it ran (``Timer.kernel_s``): transformers' forward waits for the
  GPU once before its layers, so events behind a spin would time the host's
  pace there.
- host time (the MLP): the host's own time per call, the GPU kept ahead
  (``Timer.host_s``): what a call costs the CPU.
- wall time: to a synchronized result, the GPU not kept ahead: what a user
  waits, bound by the host or by the GPU, whichever is slower.

On a CPU all three are ``time.perf_counter`` figures of the same code path:
a smoke test, not a performance figure.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from . import accuracy, model_grid
from .implementations import EAGER
from .model_grid import Gemma3Size, ModelPlan
from .model_implementations import ModelForwards
from .timing import (
    Deadline,
    Timer,
    capture_graph,
    garbage_collector_paused,
    peak_memory_of_call,
    round_order,
    synchronize,
)
from .workloads import failure_text


@dataclass
class ModelContext:
    """What every part needs: the device, the timer, the plan, the kernel build, the deadline."""

    device: torch.device
    timer: Timer
    plan: ModelPlan
    kernel_dir: Path
    deadline: Deadline
    implementations: tuple[str, ...]


def _median_us(seconds: list[float], per: int = 1) -> float:
    return statistics.median(seconds) / per * 1e6


def _rounds_ms(**seconds: list[float]) -> dict[str, list[float]]:
    """Each round's figure in ms, as ``<name>_rounds`` (the medians reported beside them hide the spread)."""
    return {f"{name}_rounds": [s * 1e3 for s in samples] for name, samples in seconds.items()}


def in_turns(forwards: ModelForwards, fn: Callable, prepare: Callable, measure, rounds: int) -> dict:
    """``measure(fn)`` (host, wall or kernel seconds) for each implementation, in ``rounds`` rounds taken in turns
    (``round_order``: each round starts one implementation later), ``prepare()`` before each.
    """
    samples: dict[str, list[float]] = {name: [] for name in forwards.available}
    with garbage_collector_paused():
        for round_index in range(rounds):
            for name in round_order(list(forwards.available), round_index):
                forwards.use(name)
                prepare()
                samples[name].append(measure(fn))
    return samples


def _device_timings(
    ctx: ModelContext, forwards: ModelForwards, fn: Callable, prepare: Callable, names: tuple[str, ...] = ()
) -> dict:
    """Median device seconds of ``fn`` per implementation (or of ``names``), by the Timer, in alternating rounds."""

    def prepared_for(name: str) -> Callable[[], None]:
        def switch_and_refresh() -> None:
            forwards.use(name)
            prepare()

        return switch_and_refresh

    calls = {name: (fn, prepared_for(name)) for name in names or forwards.available}
    timings = ctx.timer.timings_interleaved(calls, rounds=ctx.plan.rounds)
    return {name: timing.median_s for name, timing in timings.items()}


def _compare(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> dict:
    """Relative error against eager's tensor, and whether it is within ``tolerance``."""
    error = accuracy.rel_error(actual, expected)
    return {"rel_error": error, "tolerance": tolerance, "within_tolerance": bool(error <= tolerance)}


def _compare_tokens(actual: torch.Tensor, expected: torch.Tensor) -> dict:
    """Greedy tokens against eager's: identical, or where they first part."""
    differing = (actual != expected).flatten().nonzero()
    return {
        "identical": bool(differing.numel() == 0),
        "first_difference": int(differing[0]) if differing.numel() else None,
        "differing_tokens": int(differing.numel()),
    }


def _part_record(forwards: ModelForwards) -> dict:
    """Each implementation's entry in a part: ok so far, or why it does not run."""
    return {name: dict(status) for name, status in forwards.status.items()}


def _fail_all(results: dict, forwards: ModelForwards, err: BaseException) -> None:
    for name in forwards.available:
        results[name] = {"status": "failed", "reason": failure_text(err)}


# --------------------------------------------------------------------------------------------- the MLP alone


def _mlp_cell(ctx: ModelContext, forwards: ModelForwards, hidden: int, tokens: int) -> dict:
    layers = len(forwards.mlps)
    x = torch.randn(1, tokens, hidden, device=ctx.device, dtype=model_grid.DTYPE)

    def every_layer() -> None:
        for module in forwards.mlps:
            module(x)

    def refresh() -> None:
        x.normal_()

    results = _part_record(forwards)
    expected = None
    for name in forwards.available:  # the check: layer 0's output on the same x as eager's
        forwards.use(name)
        start = time.perf_counter()
        out = forwards.mlps[0](x)
        synchronize(ctx.device)
        results[name]["first_call_s"] = time.perf_counter() - start
        if name == EAGER:
            expected = out
        elif expected is not None:
            results[name]["vs_eager"] = _compare(out, expected, accuracy.MLP_REL_TOL[model_grid.DTYPE])
    del out, expected

    device_s: dict[str, float] = {}
    if ctx.device.type == "cuda":
        graphs = {}
        for name in forwards.available:
            forwards.use(name)
            try:
                graphs[name] = capture_graph(every_layer)
                results[name]["device_method"] = "CUDA graph replay, one call per layer"
            except Exception as err:  # timed by spun events instead (still GPU time, with launch gaps)
                results[name][
                    "device_method"
                ] = f"CUDA events behind a GPU spin (graph capture failed: {failure_text(err)})"
        replays = {name: (graph.replay, refresh) for name, graph in graphs.items()}
        device_s = {n: t.median_s for n, t in ctx.timer.timings_interleaved(replays, rounds=ctx.plan.rounds).items()}
        del graphs, replays
        spun = [name for name in forwards.available if name not in device_s]
        if spun:
            device_s.update(_device_timings(ctx, forwards, every_layer, refresh, tuple(spun)))
    else:
        device_s = _device_timings(ctx, forwards, every_layer, refresh)
    host = in_turns(forwards, every_layer, refresh, ctx.timer.host_s, ctx.plan.rounds)
    wall = in_turns(forwards, every_layer, refresh, ctx.timer.wall_s, ctx.plan.rounds)
    for name in forwards.available:
        results[name].update(
            device_us=device_s[name] / layers * 1e6,
            host_us=_median_us(host[name], layers),
            wall_us=_median_us(wall[name], layers),
        )
    return {"tokens": tokens, "results": results}


def mlp_part(ctx: ModelContext, model, forwards: ModelForwards, progress: Callable[[str], None]) -> dict:
    hidden = model.config.hidden_size
    cells = []
    with torch.no_grad():
        for tokens in ctx.plan.mlp_tokens:
            if ctx.deadline.exceeded():
                cells.append({"tokens": tokens, "skipped": ctx.deadline.reason})
                continue
            try:
                cell = _mlp_cell(ctx, forwards, hidden, tokens)
            except Exception as err:
                cell = {"tokens": tokens, "results": _part_record(forwards)}
                _fail_all(cell["results"], forwards, err)
            cells.append(cell)
            progress(f"mlp x{tokens}: " + _us_summary(cell["results"], ("device_us", "host_us")))
    return {
        "layers_per_measurement": len(forwards.mlps),
        "input": "[1, tokens, hidden] N(0, 1), drawn afresh before each repetition",
        "method": (
            "device_us: one call per layer (each layer its own weights) in a CUDA graph, replay median per call; "
            "host_us: the same loop's host time per call with the GPU kept ahead (queued behind a GPU spin); "
            "wall_us: the loop to a synchronized result, per call; medians over rounds taken in turns"
        ),
        "cells": cells,
    }


def _us_summary(results: dict, keys: tuple[str, ...]) -> str:
    parts = []
    for name, r in results.items():
        if r.get("status") != "ok" or keys[0] not in r:
            parts.append(f"{name} {r.get('status')}")
            continue
        parts.append(f"{name} " + "/".join(f"{r[k]:.1f}" for k in keys))
    return " | ".join(parts) + f" ({'/'.join(keys)})"


# --------------------------------------------------------------------------------------------- prefill


def prefill_part(ctx: ModelContext, model, forwards: ModelForwards, progress: Callable[[str], None]) -> dict:
    tokens, vocab = ctx.plan.prefill_tokens, model.config.vocab_size
    results = _part_record(forwards)
    generator = torch.Generator(device="cpu").manual_seed(1)
    checked_ids = torch.randint(vocab, (1, tokens), generator=generator).to(ctx.device)
    ids = torch.randint(vocab, (1, tokens), device=ctx.device)

    def forward() -> None:
        model(input_ids=ids, use_cache=False, logits_to_keep=1)

    def refresh() -> None:
        ids.random_(0, vocab)

    tolerance = accuracy.MODEL_LOGITS_REL_TOL[model_grid.DTYPE]
    with torch.no_grad():
        try:
            expected = None
            for name in forwards.available:
                forwards.use(name)
                start = time.perf_counter()
                logits = model(input_ids=checked_ids, use_cache=False).logits
                synchronize(ctx.device)
                results[name]["first_call_s"] = time.perf_counter() - start
                if name == EAGER:
                    expected = logits
                elif expected is not None:
                    results[name]["logits_vs_eager"] = {
                        **_compare(logits, expected, tolerance),
                        "argmax_agreement": float((logits.argmax(-1) == expected.argmax(-1)).float().mean()),
                    }
            del logits, expected
            rounds = ctx.plan.model_rounds
            kernels = in_turns(forwards, forward, refresh, ctx.timer.kernel_s, rounds)
            wall = in_turns(forwards, forward, refresh, ctx.timer.wall_s, rounds)
            layers = len(forwards.mlps)
            for name in forwards.available:
                device_ms = statistics.median(kernels[name]) * 1e3
                results[name].update(
                    device_ms=device_ms,
                    wall_ms=statistics.median(wall[name]) * 1e3,
                    device_ms_per_layer=device_ms / layers,
                    **_rounds_ms(device_ms=kernels[name], wall_ms=wall[name]),
                )
        except Exception as err:
            _fail_all(results, forwards, err)
    progress("prefill: " + _us_summary(results, ("device_ms", "wall_ms")))
    return {
        "tokens": tokens,
        "input": "[1, tokens] random token ids, drawn afresh before each repetition; logits of the last position only",
        "method": (
            f"device_ms: the sum of the forward's kernels (torch.profiler; GPU time without launch gaps); wall_ms: to "
            f"a synchronized result; medians of {ctx.plan.model_rounds} rounds taken in turns"
        ),
        "results": results,
    }


# --------------------------------------------------------------------------------------------- decode


def _static_cache(model, max_cache_len: int):
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def static_decode(model, prompt: torch.Tensor, new_tokens: int, device: torch.device):
    """Greedy tokens from a loop of single-token forwards on a static cache; the loop's wall seconds.

    The prefill fills the cache (not timed); then ``new_tokens`` forwards of
    one token each, every next token chosen on the device (argmax), so the
    loop never waits for the GPU until the end.
    """
    length = prompt.shape[1]
    cache = _static_cache(model, length + new_tokens)
    positions = torch.arange(length + new_tokens, device=device)
    logits = model(input_ids=prompt, past_key_values=cache, cache_position=positions[:length], logits_to_keep=1).logits
    token = logits[:, -1:].argmax(-1)
    generated = []
    synchronize(device)
    start = time.perf_counter()
    for step in range(new_tokens):
        generated.append(token)
        position = positions[length + step : length + step + 1]
        logits = model(input_ids=token, past_key_values=cache, cache_position=position).logits
        token = logits[:, -1:].argmax(-1)
    synchronize(device)
    return torch.cat(generated, dim=1), time.perf_counter() - start, cache


def greedy_generate(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """HF ``generate``, greedy, exactly ``new_tokens`` new tokens (end-of-sequence suppressed).

    ``disable_compile``: generate compiles the whole forward on its own where
    its cache allows; the figure is of generate as the model runs, not compiled.
    """
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        disable_compile=True,
    )
    return out[:, prompt.shape[1] :]


def decode_part(ctx: ModelContext, model, forwards: ModelForwards, progress: Callable[[str], None]) -> dict:
    plan, vocab, device = ctx.plan, model.config.vocab_size, ctx.device
    results = _part_record(forwards)
    generator = torch.Generator(device="cpu").manual_seed(2)
    checked_prompt = torch.randint(vocab, (1, plan.prompt_tokens), generator=generator).to(device)
    prompt = torch.randint(vocab, (1, plan.prompt_tokens), device=device)

    def refresh() -> None:
        prompt.random_(0, vocab)

    with torch.no_grad():
        try:
            expected = None
            for name in forwards.available:  # the check: greedy tokens of a fixed prompt, both ways
                forwards.use(name)
                generated = greedy_generate(model, checked_prompt, plan.new_tokens)
                looped = static_decode(model, checked_prompt, plan.new_tokens, device)[0]
                results[name]["static_loop_matches_generate"] = bool(torch.equal(generated, looped))
                if name == EAGER:
                    expected = generated
                elif expected is not None:
                    results[name]["tokens_vs_eager"] = _compare_tokens(generated, expected)
            generate_wall = in_turns(
                forwards, lambda: greedy_generate(model, prompt, plan.new_tokens), refresh, ctx.timer.wall_s, plan.rounds
            )
            def static_loop_s() -> float:  # static_decode times its own loop
                return static_decode(model, prompt, plan.new_tokens, device)[1]

            loop_wall = in_turns(forwards, static_loop_s, refresh, lambda fn: fn(), plan.rounds)
            step_s = _decode_step_device_s(ctx, model, forwards, prompt)
            layers = len(forwards.mlps)
            for name in forwards.available:
                generate_s = statistics.median(generate_wall[name])
                loop_s = statistics.median(loop_wall[name])
                results[name].update(
                    generate_tokens_per_s=plan.new_tokens / generate_s,
                    generate_wall_ms=generate_s * 1e3,
                    static_loop_tokens_per_s=plan.new_tokens / loop_s,
                    static_step_wall_ms=loop_s / plan.new_tokens * 1e3,
                    static_step_device_ms=step_s[name] * 1e3,
                    static_step_device_ms_per_layer=step_s[name] * 1e3 / layers,
                    **_rounds_ms(generate_wall_ms=generate_wall[name], static_loop_wall_ms=loop_wall[name]),
                )
        except Exception as err:
            _fail_all(results, forwards, err)
    progress(
        "decode: "
        + _us_summary(results, ("generate_tokens_per_s", "static_loop_tokens_per_s", "static_step_device_ms"))
    )
    return {
        "batch": 1,
        "prompt_tokens": plan.prompt_tokens,
        "new_tokens": plan.new_tokens,
        "method": (
            "generate: HF generate, greedy, exactly new_tokens tokens, wall time to a synchronized result (prefill "
            "of the prompt included); static loop: single-token forwards on a StaticCache, the next token chosen on "
            "the device, wall time of the loop (prefill not included); static_step_device_ms: one such forward, the "
            f"sum of its kernels (torch.profiler), median of {plan.model_rounds} rounds; medians over rounds taken "
            "in turns, a fresh random prompt each"
        ),
        "results": results,
    }


def _decode_step_device_s(ctx: ModelContext, model, forwards: ModelForwards, prompt: torch.Tensor) -> dict:
    """GPU seconds of one single-token forward on a static cache (median of its kernels' sums).

    Each forward writes the next slot of the cache (transformers keeps its own
    count of the tokens a static cache holds), so the cache is emptied before
    every repetition: a step on a static cache attends over all of its slots
    whatever they hold, so every repetition does the same work.
    """
    length = prompt.shape[1]
    cache = _static_cache(model, length + 1)
    token = prompt[:, -1:].clone()
    position = torch.tensor([length], device=ctx.device)

    def step() -> None:
        model(input_ids=token, past_key_values=cache, cache_position=position)

    kernels = in_turns(forwards, step, cache.reset, ctx.timer.kernel_s, ctx.plan.model_rounds)
    return {name: statistics.median(samples) for name, samples in kernels.items()}


# --------------------------------------------------------------------------------------------- training


def _gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _gradient_rel_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    """||g - g_eager|| / ||g_eager|| over every parameter's gradient together (NaN if any is not finite)."""
    accumulator = accuracy.ErrorAccumulator()
    for name, grad in expected.items():
        accumulator.add(actual.get(name, torch.zeros_like(grad)), grad.double())
    return accumulator.value()


def training_part(ctx: ModelContext, model, forwards: ModelForwards, progress: Callable[[str], None]) -> dict:
    plan, vocab, device = ctx.plan, model.config.vocab_size, ctx.device
    results = _part_record(forwards)
    shape = (plan.training_batch, plan.training_sequence)
    generator = torch.Generator(device="cpu").manual_seed(3)
    checked_ids = torch.randint(vocab, shape, generator=generator).to(device)
    ids = torch.randint(vocab, shape, device=device)

    def step() -> None:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    def refresh() -> None:
        model.zero_grad(set_to_none=True)
        ids.random_(0, vocab)

    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    tolerance = accuracy.MODEL_GRADIENT_REL_TOL[model_grid.DTYPE]
    try:
        expected_loss = expected_grads = None
        for name in forwards.available:  # the check: loss and every gradient on fixed tokens
            forwards.use(name)
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss = model(input_ids=checked_ids, labels=checked_ids, use_cache=False).loss
            loss.backward()
            synchronize(device)
            results[name]["first_call_s"] = time.perf_counter() - start
            grads, loss = _gradients(model), loss.detach()
            if name == EAGER:
                expected_loss, expected_grads = loss, grads
            elif expected_grads is not None:
                results[name]["vs_eager"] = {
                    "loss": float(loss),
                    "eager_loss": float(expected_loss),
                    "loss_rel_error": abs(float(loss) - float(expected_loss)) / abs(float(expected_loss)),
                    "gradients": {
                        "rel_error": _gradient_rel_error(grads, expected_grads),
                        "tolerance": tolerance,
                    },
                }
                gradients = results[name]["vs_eager"]["gradients"]
                gradients["within_tolerance"] = bool(gradients["rel_error"] <= tolerance)
            del loss, grads
        del expected_grads
        model.zero_grad(set_to_none=True)
        for name in forwards.available:  # peak memory of one step, from a state with no gradients
            forwards.use(name)
            refresh()
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            results[name]["peak_bytes_above_weights"] = peak_memory_of_call(device, step)[1]
        model.zero_grad(set_to_none=True)
        kernels = in_turns(forwards, step, refresh, ctx.timer.kernel_s, plan.model_rounds)
        wall = in_turns(forwards, step, refresh, ctx.timer.wall_s, plan.model_rounds)
        for name in forwards.available:
            results[name].update(
                device_ms=statistics.median(kernels[name]) * 1e3,
                wall_ms=statistics.median(wall[name]) * 1e3,
                **_rounds_ms(device_ms=kernels[name], wall_ms=wall[name]),
            )
    except Exception as err:
        _fail_all(results, forwards, err)
    model.zero_grad(set_to_none=True)
    progress("training: " + _us_summary(results, ("device_ms", "wall_ms")))
    return {
        "batch": plan.training_batch,
        "sequence": plan.training_sequence,
        "vocab": vocab,
        "layers": len(forwards.mlps),
        "weight_bytes": weight_bytes,
        "note": model_grid.TRAINING_VOCAB_NOTE.format(vocab=vocab),
        "method": (
            "one step: forward and backward of the causal-LM loss (HF labels), gradients set to None before each; "
            "device_ms: the sum of the step's kernels (torch.profiler; GPU time without launch gaps); wall_ms: to a "
            f"synchronized result; medians of {plan.model_rounds} rounds taken in turns; peak_bytes_above_weights: "
            "torch.cuda.max_memory_allocated during one step less what was allocated before it (weights and token ids): activations, the weight gradients, logits "
            "and temporaries"
        ),
        "results": results,
    }


# --------------------------------------------------------------------------------------------- one model


def model_forwards(ctx: ModelContext, model, training: bool) -> ModelForwards:
    return ModelForwards(
        model,
        ctx.implementations,
        kernel_dir=ctx.kernel_dir,
        approximate=model_grid.APPROXIMATE,
        device=ctx.device,
        training=training,
    )


def release(device: torch.device) -> None:
    """Free what the last model left: Python garbage, Dynamo's graphs, the allocator's cache."""
    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


INFERENCE_PARTS = {model_grid.MLP: mlp_part, model_grid.PREFILL: prefill_part, model_grid.DECODE: decode_part}


def measure_size(ctx: ModelContext, size: Gemma3Size, parts: tuple[str, ...], progress: Callable[[str], None]) -> dict:
    """Every asked part of one Gemma3 size: the inference model's parts, then the training model's."""
    plan = ctx.plan
    layers = plan.layers_of(size)
    record = {
        "size": size.name,
        "config": {**size.__dict__, "layers_built": layers},
        "per_layer_note": (
            f"{layers} of {size.layers} layers built: per-layer figures are comparable with the full model's"
            if layers < size.layers
            else None
        ),
    }
    inference_parts = [part for part in INFERENCE_PARTS if part in parts]
    if inference_parts:
        model = model_grid.build_model(size, layers, ctx.device)
        record["parameters"] = sum(p.numel() for p in model.parameters())
        forwards = model_forwards(ctx, model, training=False)
        record["implementations"] = forwards.status
        progress(f"{size.name}: {layers} layers, {record['parameters'] / 1e9:.2f} B parameters; {_statuses(forwards)}")
        for part in inference_parts:
            if ctx.deadline.exceeded():
                record[part] = {"skipped": ctx.deadline.reason}
                continue
            record[part] = INFERENCE_PARTS[part](ctx, model, forwards, progress)
        del model, forwards
        release(ctx.device)
    if model_grid.TRAINING in parts and size.name in plan.training_sizes:
        if ctx.deadline.exceeded():
            record[model_grid.TRAINING] = {"skipped": ctx.deadline.reason}
        else:
            model = model_grid.build_model(
                size, plan.layers_of(size, training=True), ctx.device, vocab=plan.training_vocab
            )
            model.train()
            forwards = model_forwards(ctx, model, training=True)
            record[model_grid.TRAINING] = training_part(ctx, model, forwards, progress)
            del model, forwards
            release(ctx.device)
    return record


def _statuses(forwards: ModelForwards) -> str:
    return ", ".join(
        name if status["status"] == "ok" else f"{name} {status['status']} ({status['reason']})"
        for name, status in forwards.status.items()
    )


def measured_results(models: list[dict]):
    """(where, implementation, result) for each implementation's result in every part of every model."""
    for record in models:
        for part in model_grid.PARTS:
            entry = record.get(part) or {}
            for cell in entry.get("cells") or ([entry] if "results" in entry else []):
                where = f"{record['size']} {part}" + (f" x{cell['tokens']}" if part == model_grid.MLP else "")
                for name, result in cell.get("results", {}).items():
                    yield where, name, result


def differences(models: list[dict]) -> list[dict]:
    """Everywhere an implementation's result differs from eager's beyond its tolerance, or its tokens do."""
    return [
        {"where": where, "implementation": name, "check": check, **verdict}
        for where, name, result in measured_results(models)
        for check, verdict in _verdicts(result)
        if not verdict["ok"]
    ]


def _verdicts(result: dict):
    """(check, {"ok": bool, ...details}) for each comparison with eager in one implementation's result."""
    if "vs_eager" in result and "rel_error" in result["vs_eager"]:
        v = result["vs_eager"]
        yield "output", {"ok": v["within_tolerance"], "rel_error": v["rel_error"], "tolerance": v["tolerance"]}
    if "logits_vs_eager" in result:
        v = result["logits_vs_eager"]
        yield "logits", {"ok": v["within_tolerance"], "rel_error": v["rel_error"], "tolerance": v["tolerance"]}
    if "tokens_vs_eager" in result:
        v = result["tokens_vs_eager"]
        yield "greedy tokens", {"ok": v["identical"], "first_difference": v["first_difference"]}
    if "static_loop_matches_generate" in result:
        yield "static-cache loop's tokens vs generate's (same implementation)", {
            "ok": result["static_loop_matches_generate"]
        }
    gradients = result.get("vs_eager", {}).get("gradients")
    if gradients is not None:
        yield "gradients", {
            "ok": gradients["within_tolerance"],
            "rel_error": gradients["rel_error"],
            "tolerance": gradients["tolerance"],
        }
