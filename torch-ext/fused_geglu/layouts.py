"""The module transformers builds in place of a Gemma MLP when a ``KernelConfig`` names ``GeGLUMLP``.

transformers 5.22+ reads ``KernelConfig({"Gemma3MLP": "org/fused-geglu:GeGLUMLP"})``
this way: it loads the ``GeGLUMLP`` layer, looks for a class named
``GeGLUMLPLayout`` in the layer's own module (``layers.py`` imports it from
here), builds the model with that class wherever ``Gemma3MLP`` stood, and
``kernelize`` then replaces its ``forward`` with ``GeGLUMLP.forward``. No
registration by the user is needed.

Gemma 3n's and T5Gemma's MLPs hold more (a per-layer intermediate size and
``activation_sparsity``, a ``dropout``) and are not built by this layout; the
layer runs them where they keep their own class (registration, kernelize).

The layout holds exactly what a Gemma, Gemma2 or Gemma3 MLP holds, under the
same names (so the checkpoint's ``gate_proj``/``up_proj``/``down_proj``
weights load, and ``GeGLUMLP`` finds ``act_fn``). Its own ``forward`` is the
eager one: where ``kernelize`` falls back (no mapping for the device, a
kernel that cannot load), the model still computes the right thing, unfused.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class GeGLUMLPLayout(nn.Module):
    """``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, built from a Gemma, Gemma2 or Gemma3 text config."""

    def __init__(self, config):
        super().__init__()
        # transformers is there whenever it builds a model with this class; the
        # kernel itself does not depend on it.
        from transformers.activations import ACT2FN

        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        # Gemma2/Gemma3 configs name the activation hidden_activation, Gemma's hidden_act.
        self.act_fn = ACT2FN[getattr(config, "hidden_activation", None) or config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
