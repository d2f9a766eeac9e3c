"""Generation with each LoRA layer run as one linear layer, its adapters merged into a copy of the base weight.

PEFT computes a LoRA linear layer as the base layer plus ``B(A(x)) * scaling`` for each active adapter: two more
small matmuls and some Python per layer and forward, which in a profiled SmolLM2 d3 rollout under bf16 on CPU
cost over half as much as the base layers themselves. :class:`MergedLoRA` computes
``W + sum(scaling * B @ A)`` once per weight version (in float32, stored in the compute dtype) and, for a block of
generation, has each layer's forward call ``F.linear`` with it. The base weights are never written (PEFT's own
``merge_adapter`` adds into them, which bf16 cannot undo exactly); the cost is a second copy of the adapted
layers' weights in memory. Outputs differ from PEFT's by rounding only, so the engine uses it where the learner
scores the episodes again anyway (bf16). Layers it cannot merge exactly as PEFT computes them (DoRA and other
variants, ``fan_in_fan_out``, a base layer other than ``nn.Linear``, PEFT's own merged state) keep PEFT's forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from peft.tuners.lora.layer import Linear as LoraLinear

__all__ = ["MergedLoRA", "mergeable"]


def mergeable(layer: torch.nn.Module) -> bool:
    """Whether ``layer`` is a PEFT LoRA linear layer whose active adapters :class:`MergedLoRA` merges exactly
    as PEFT computes them (plain LoRA on an ``nn.Linear``, not merged by PEFT, adapters enabled)."""
    return (isinstance(layer, LoraLinear) and isinstance(layer.get_base_layer(), torch.nn.Linear)
            and not layer.merged and not layer.disable_adapters and not layer.fan_in_fan_out
            and not any(name in layer.lora_variant for name in layer.active_adapters))


class MergedLoRA:
    """Merged weights of a model's LoRA layers, kept between blocks of generation and computed again for a layer
    whose weights or active adapters changed (autograd's version counters see optimizer steps and loads)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        self.model = model
        self.dtype = dtype
        self._weights: dict[LoraLinear, tuple[tuple[Any, ...], torch.Tensor]] = {}

    @contextmanager
    def applied(self) -> Iterator[int]:
        """Run a block (no backward) with every mergeable layer's forward one ``F.linear`` on its merged weight;
        yields how many layers were merged."""
        layers = [layer for layer in self.model.modules() if mergeable(layer)]
        try:
            for layer in layers:
                weight, bias = self._merged(layer), layer.get_base_layer().bias
                layer.forward = lambda x, *args, _w=weight, _b=bias, **kwargs: F.linear(x, _w, _b)
            yield len(layers)
        finally:
            for layer in layers:
                layer.__dict__.pop("forward", None)

    def _merged(self, layer: LoraLinear) -> torch.Tensor:
        names = [name for name in layer.active_adapters if name in layer.lora_A]
        base = layer.get_base_layer().weight
        key = (tuple(names), base._version, base.data_ptr(),
               *((layer.lora_A[name].weight._version, layer.lora_B[name].weight._version, layer.scaling[name])
                 for name in names))
        cached = self._weights.get(layer)
        if cached is not None and cached[0] == key:
            return cached[1]
        with torch.no_grad():
            weight = base.float()
            for name in names:
                delta = layer.lora_B[name].weight.float() @ layer.lora_A[name].weight.float()
                weight = weight + delta * layer.scaling[name]
            merged = weight.to(self.dtype)
        self._weights[layer] = (key, merged)
        return merged
