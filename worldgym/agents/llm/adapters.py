"""PEFT LoRA helpers: seeded set-up, switching the active adapters without freezing the others, saving one flat.

Two PEFT behaviours trip trainers that hold several adapters (peft 0.21): ``set_adapter`` marks every adapter
it does not activate as not trainable, and ``add_adapter`` adds a frozen adapter. A trainer that collects its
trainable parameters once, or runs two forwards with different adapters before one backward, then silently
trains one adapter only. :func:`activate_adapters` switches and keeps the named adapters trainable.

A fourth makes recomputed activations wrong: the active adapters are module state, read at each forward. A
backward pass that recomputes a checkpointed block (``torch.utils.checkpoint``, or activation checkpointing)
after the caller switched adapters back would recompute it under the wrong adapters and send the gradient there.
:func:`recompute_under_active_adapters` gives the recomputation the forward's adapters back.

A third costs time: PEFT's trainable-token layers (the embedding rows of added special tokens, LoRA's
``trainable_token_indices``) rebuild the whole embedding matrix on every forward, twice per decoding step with
tied embeddings. :func:`merged_trainable_tokens` writes those rows in once for a block of generation.
"""

from __future__ import annotations

import copy
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.trainable_tokens.layer import TrainableTokensLayer
from peft.utils import get_peft_model_state_dict
from safetensors.torch import save_file

from worldgym.config import check_field

__all__ = [
    "activate_adapters", "activation_checkpointing_paused", "active_adapters", "disable_activation_checkpointing",
    "enable_activation_checkpointing", "merged_trainable_tokens", "of_adapter", "peft_deprecation_notices_hidden",
    "recompute_under_active_adapters", "save_adapter_flat", "seeded_lora", "using_adapters",
]

ADAPTER_WEIGHTS = "adapter_model.safetensors"


@contextmanager
def peft_deprecation_notices_hidden() -> Iterator[None]:
    """Wrap a PEFT model's construction (``get_peft_model``, ``PeftModel.from_pretrained``): PEFT reads
    transformers' deprecated ``is_gradient_checkpointing``, a notice meant for PEFT, not for this library's user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def seeded_lora(
    model: torch.nn.Module,
    seed: int,
    *,
    rank: int,
    alpha: int,
    target_modules: Sequence[str] | str,
    dropout: float = 0.0,
    adapter_names: Sequence[str] = ("default",),
    adapter_options: Mapping[str, Mapping[str, Any]] | None = None,
    **options: Any,
) -> PeftModel:
    """``model`` with the causal-LM LoRA adapters ``adapter_names``, all of one shape; their initial weights are
    drawn from ``seed``, in order, and the caller's global torch RNG is untouched (the draw runs inside
    ``torch.random.fork_rng``). ``options`` are further :class:`peft.LoraConfig` fields (e.g.
    ``trainable_token_indices``, ``init_lora_weights``); ``adapter_options[name]`` adds fields for adapter
    ``name`` alone. The first adapter is active; PEFT adds the others frozen (:func:`activate_adapters` switches
    and re-enables them).

    >>> from worldgym.agents.llm.models import model_from_config, tiny_model_config
    >>> base = lambda: model_from_config(tiny_model_config(64, pad_token_id=0))
    >>> first, second = (seeded_lora(base(), 3, rank=2, alpha=4, target_modules=["q_proj"]) for _ in range(2))
    >>> all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
    True
    """
    check_field(bool(adapter_names), "adapter_names", adapter_names, "name at least one adapter")
    adapter_options = adapter_options or {}
    unknown = sorted(set(adapter_options) - set(adapter_names))
    check_field(not unknown, "adapter_options", unknown, f"name adapters of {list(adapter_names)}")
    targets = target_modules if isinstance(target_modules, str) else list(target_modules)

    def lora(name: str) -> LoraConfig:
        return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, task_type="CAUSAL_LM",
                          target_modules=targets, **options | dict(adapter_options.get(name, {})))

    with torch.random.fork_rng(devices=[]), peft_deprecation_notices_hidden():
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, lora(adapter_names[0]), adapter_name=adapter_names[0])
        for name in adapter_names[1:]:
            peft_model.add_adapter(name, lora(name))
    return peft_model


def active_adapters(model: PeftModel) -> tuple[str, ...]:
    """The adapters the model's forward uses now."""
    return tuple(model.active_adapters)


def activate_adapters(model: PeftModel, names: Sequence[str], trainable: Sequence[str] = ()) -> None:
    """Make ``names`` the adapters every forward uses (several are summed), and keep each adapter in
    ``trainable`` trainable (PEFT's ``set_adapter`` would freeze the inactive ones)."""
    unknown = sorted(set(names) - set(model.peft_config))
    if not names or unknown:
        raise ValueError(f"unknown adapters {unknown or list(names)}; the model has {sorted(model.peft_config)}")
    model.base_model.set_adapter(list(names) if len(names) > 1 else names[0])
    if trainable:
        model.set_requires_grad(list(trainable), requires_grad=True)


@contextmanager
def using_adapters(model: PeftModel, names: Sequence[str], trainable: Sequence[str] = ()) -> Iterator[None]:
    """Run a block with ``names`` active (all of ``trainable`` stay trainable); the previous adapters are active
    again afterwards, even if the block raises."""
    previous = active_adapters(model)
    activate_adapters(model, names, trainable)
    try:
        yield
    finally:
        activate_adapters(model, previous, trainable)


ContextFn = Callable[[], tuple[AbstractContextManager[None], AbstractContextManager[None]]]


def recompute_under_active_adapters(model: torch.nn.Module) -> ContextFn:
    """A ``context_fn`` for non-reentrant :func:`torch.utils.checkpoint.checkpoint`: the backward pass recomputes
    each checkpointed block under the adapters that were active when its forward ran (a block scored under the
    world model's adapter is recomputed under it, not under whatever the trainer activated since). A model
    without adapters recomputes as it is."""
    if not isinstance(model, PeftModel):
        return lambda: (nullcontext(), nullcontext())

    def context_fn() -> tuple[AbstractContextManager[None], AbstractContextManager[None]]:
        return nullcontext(), _recomputing_under(model, active_adapters(model))

    return context_fn


@contextmanager
def _recomputing_under(model: PeftModel, names: tuple[str, ...]) -> Iterator[None]:
    if active_adapters(model) == names:  # the common case (one adapter, or no switch since): nothing to do
        yield
        return
    with using_adapters(model, names, trainable_adapters(model)):  # looked up only when switching
        yield


def of_adapter(parameter_name: str, adapter: str) -> bool:
    """Whether a PEFT parameter belongs to ``adapter``: a LoRA layer's ``...lora_A.<adapter>.weight`` or a
    trainable-token layer's ``...trainable_tokens_delta.<adapter>``."""
    return f".{adapter}." in parameter_name or parameter_name.endswith(f".{adapter}")


def trainable_adapters(model: PeftModel) -> list[str]:
    """The adapters with at least one trainable tensor."""
    names = set()
    for parameter_name, parameter in model.named_parameters():
        if parameter.requires_grad:
            names.update(name for name in model.peft_config if of_adapter(parameter_name, name))
    return sorted(names)


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """transformers' activation checkpointing (non-reentrant), each layer recomputed in the backward pass under
    the adapters its forward used (:func:`recompute_under_active_adapters`). It acts in training mode only."""
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={
        "use_reentrant": False, "context_fn": recompute_under_active_adapters(model)})


def disable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Undo :func:`enable_activation_checkpointing`: every layer keeps its activations again."""
    model.activation_checkpointing_disable()


@contextmanager
def activation_checkpointing_paused(model: torch.nn.Module) -> Iterator[None]:
    """Run a block's forwards without activation checkpointing (its layers keep their activations for the
    backward pass, which then recomputes nothing); the layers that had it get it back after the block. The
    choice is made at each forward, so a backward after the block still uses what its forward kept."""
    layers = [module for module in model.modules() if getattr(module, "gradient_checkpointing", False) is True]
    for module in layers:
        module.gradient_checkpointing = False
    try:
        yield
    finally:
        for module in layers:
            module.gradient_checkpointing = True


@contextmanager
def merged_trainable_tokens(model: torch.nn.Module) -> Iterator[int]:
    """Run a block (generation, no backward) with the active adapters' trainable token rows merged into the base
    embedding (and tied LM head); yields how many layers were merged.

    Exact: merging copies the trained rows in and unmerging copies the saved original rows back, so forwards
    inside the block compute what they compute outside it, without a ``vocab x hidden`` copy per forward. PEFT
    writes through ``weight.data``, so the parameters' autograd version counters do not move (an engine that
    watches them for updates keeps its KV cache). Layers already merged, or whose adapters are disabled, are
    left as they are.
    """
    layers = [module for module in model.modules()
              if isinstance(module, TrainableTokensLayer) and not module.merged and not module.disable_adapters]
    merged: list[TrainableTokensLayer] = []
    try:
        with torch.no_grad():
            for layer in layers:
                names = [name for name in layer.active_adapters if name in layer.token_indices]
                if names:
                    layer.merge(adapter_names=names)
                    merged.append(layer)
        yield len(merged)
    finally:
        with torch.no_grad():
            for layer in reversed(merged):  # tied layers share one weight: restore in reverse order
                layer.unmerge()


def save_adapter_flat(model: PeftModel, name: str, path: str | Path, token_rows: bool = True) -> Path:
    """Save adapter ``name`` alone as a flat folder (``adapter_config.json`` and ``adapter_model.safetensors``
    at its root), which ``PeftModel.from_pretrained(base, path)`` and vLLM's ``LoRARequest`` read.
    ``token_rows=False`` leaves out its trainable token rows (and ``trainable_token_indices``): vLLM refuses an
    adapter that holds them, so a base with those rows written in goes beside it instead.

    ``PeftModel.save_pretrained`` puts every adapter not named ``"default"`` in a subfolder of its own, where
    vLLM finds nothing.
    """
    if name not in model.peft_config:
        raise ValueError(f"no adapter {name!r}; the model has {sorted(model.peft_config)}")
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    weights = get_peft_model_state_dict(model, adapter_name=name)
    if not token_rows:
        weights = {key: value for key, value in weights.items() if "trainable_tokens_" not in key}
    save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(path / ADAPTER_WEIGHTS),
              metadata={"format": "pt"})
    config = model.peft_config[name]
    if not token_rows and getattr(config, "trainable_token_indices", None):
        config = copy.copy(config)
        config.trainable_token_indices = None
    config.save_pretrained(str(path))  # writes adapter_config.json
    return path
