"""The machinery behind ``python -m geglu_triton bench`` and ``profile``.

One concern per module:

- ``grid``: what is measured (shapes, dtypes, models, budgets): the one source of truth;
- ``accuracy``: float64 references and the tolerances a result must meet;
- ``timing``: the median-of-events timer, the device's copy and matmul ceilings, peak memory;
- ``environment``: the device, library versions, and loading the built kernel;
- ``modules``: the Gemma-style MLP and the fused and Liger forms of it;
- ``implementations``: eager, torch.compile, Liger and ours, each with why it may be unavailable;
- ``workloads``: the activation and MLP cells: inputs, byte and flop models, one measured cell;
- ``host``: per-call CPU overhead, recompilations, cold first-call latency (``coldstart`` is
  the child process that measures the last);
- ``report`` and ``plots``: the markdown tables and the figures.
"""
