"""Take an LLM agent's trained policy elsewhere: a standard PEFT adapter folder (or a full transformers model
folder) plus its tokenizer, loadable with plain ``transformers`` + ``peft``.

A run keeps what an export needs beside its checkpoints, written once when training starts:
``<run>/policy_base/`` holds the tokenizer (with the tool and world-model tokens), the frozen base model the
adapters sit on (a copy, for models up to :data:`MAX_BASE_COPY_PARAMS` parameters) and ``base.json`` (the
fine-tuning mode, each adapter's ``LoraConfig`` and the adapters the policy's forward uses). :func:`export_run`
then rebuilds the policy from ``policy_base/`` and a checkpoint's weights and writes:

* LoRA with one policy adapter: ``adapter_config.json`` + ``adapter_model.safetensors`` at the folder's root
  (what ``PeftModel.from_pretrained(base, DIR)`` and vLLM's ``LoRARequest`` / ``--lora-modules`` read), the
  tokenizer, and the base model in ``DIR/base_model`` (``adapter_config.json`` points at it). Trained rows of
  added tokens (LoRA's ``trainable_token_indices``) are written into that base model's embedding (and tied LM
  head), not into the adapter: vLLM refuses an adapter that holds such rows, and the base with the rows plus the
  LoRA-only adapter compute exactly what the policy computes;
* full fine-tuning (the tiny from-scratch model), or several adapters summed into the policy: one full
  transformers model folder (``AutoModelForCausalLM.from_pretrained(DIR)``) with the tokenizer.
"""

from __future__ import annotations

import json
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.llm.adapters import (
    active_adapters,
    merged_trainable_tokens,
    peft_deprecation_notices_hidden,
    save_adapter_flat,
    using_adapters,
)
from worldgym.agents.llm.models import load_tokenizer
from worldgym.checkpointing import atomic_directory, load_checkpoint
from worldgym.errors import ExportError

__all__ = [
    "BASE_FILE",
    "BASE_MODEL_DIR",
    "EXPORT_FILE",
    "MAX_BASE_COPY_PARAMS",
    "POLICY_BASE",
    "export_policy",
    "export_run",
    "save_policy_base",
]

POLICY_BASE = "policy_base"  # <run>/policy_base: what an export needs besides a checkpoint
BASE_FILE = "base.json"
BASE_MODEL_DIR = "base_model"  # the frozen base model's folder, in policy_base/ and in an adapter export
EXPORT_FILE = "worldgym_export.json"  # an export's provenance: run, checkpoint, step, layout
MAX_BASE_COPY_PARAMS = 50_000_000  # larger bases are not copied into every run (SmolLM2-135M: 135M)
_AUXILIARY = "auxiliary/"  # checkpoint keys of an auxiliary loss's state, not of the policy


def save_policy_base(run_dir: str | Path, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Path:
    """Write ``<run_dir>/policy_base/`` for ``policy`` (a ``PeftModel`` with LoRA adapters, or a model trained
    in full) as it is before training: tokenizer, base model copy (when small enough) and ``base.json``."""
    folder = Path(run_dir) / POLICY_BASE
    with atomic_directory(folder) as tmp:
        tokenizer.save_pretrained(tmp)
        lora = isinstance(policy, PeftModel)
        info: dict[str, Any] = {"finetune": "lora" if lora else "full"}
        if lora:
            info["adapters"] = {name: _lora_dict(config) for name, config in policy.peft_config.items()}
            info["policy_adapters"] = list(active_adapters(policy))
        info["base_params"] = sum(p.numel() for name, p in policy.named_parameters() if "lora_" not in name)
        if info["base_params"] <= MAX_BASE_COPY_PARAMS:
            (_unwrapped_base(policy) if lora else policy).save_pretrained(tmp / BASE_MODEL_DIR)
        (tmp / BASE_FILE).write_text(json.dumps(info, indent=1) + "\n")
    return folder


def export_policy(policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path,
                  policy_adapters: tuple[str, ...] | None = None) -> Path:
    """Write ``policy`` to ``out_dir`` (replaced if it exists) in the layout the module docstring describes.

    Args:
        policy: a ``PeftModel`` (its adapters ``policy_adapters``, default the active ones, are the policy) or
            a model trained in full.
        tokenizer: its tokenizer.
        out_dir: the export folder.
        policy_adapters: the adapters the policy's forward sums.
    """
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    if isinstance(policy, PeftModel):
        names = tuple(policy_adapters or active_adapters(policy))
        if len(names) == 1:
            save_adapter_flat(policy, names[0], out, token_rows=False)
            _base_with_token_rows(policy, names).save_pretrained(out / BASE_MODEL_DIR)
            _point_adapter_at_base(out)
            tokenizer.save_pretrained(out)
            return out
        policy = policy.merge_and_unload(adapter_names=list(names))  # several adapters: one summed model
    policy.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def export_run(run_dir: str | Path, checkpoint: Path, out_dir: str | Path) -> Path:
    """Export the policy of ``checkpoint`` (a checkpoint folder of ``run_dir``) to ``out_dir``.

    Raises:
        ExportError: the run kept no ``policy_base/`` (trained before exports existed, or not by an LLM agent)
            or no copy of a large base model (export from the trainer with :func:`export_policy` instead).
        CheckpointError: the checkpoint is damaged or does not fit the rebuilt policy.
    """
    base_dir = Path(run_dir) / POLICY_BASE
    if not (base_dir / BASE_FILE).is_file():
        raise ExportError(f"{run_dir} holds no {POLICY_BASE}/{BASE_FILE}: the run was not trained by an LLM agent, "
                          "or by a worldgym without exports; load its checkpoint in the trainer and call "
                          "worldgym.agents.llm.export.export_policy(trainer.policy, trainer.tokenizer, DIR)")
    info = json.loads((base_dir / BASE_FILE).read_text())
    if not (base_dir / BASE_MODEL_DIR).is_dir():
        raise ExportError(f"{base_dir} keeps no copy of its {info.get('base_params')}-parameter base model (only "
                          f"bases up to {MAX_BASE_COPY_PARAMS} are copied into a run): export from the trainer "
                          "with worldgym.agents.llm.export.export_policy(trainer.policy, trainer.tokenizer, DIR)")
    weights, state, _ = load_checkpoint(checkpoint, check_run_files=False)  # no auxiliary replay needed
    weights = {name: tensor for name, tensor in weights.items() if not name.startswith(_AUXILIARY)}
    policy = _rebuilt_policy(base_dir, info)
    _load_weights(policy, weights, checkpoint)
    names = tuple(info.get("policy_adapters", ()))
    out = export_policy(policy, load_tokenizer(base_dir), out_dir, names or None)
    layout = "peft_adapter" if info["finetune"] == "lora" and len(names) == 1 else "transformers_model"
    provenance = {"run": str(Path(run_dir).resolve()), "checkpoint": checkpoint.name, "step": state.get("step"),
                  "layout": layout, "policy_adapters": list(names)}
    (out / EXPORT_FILE).write_text(json.dumps(provenance, indent=1) + "\n")
    return out


def _rebuilt_policy(base_dir: Path, info: dict[str, Any]) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(base_dir / BASE_MODEL_DIR)
    if info["finetune"] != "lora":
        return model
    adapters = list(info["adapters"].items())
    first, config = adapters[0]
    with peft_deprecation_notices_hidden():
        policy = get_peft_model(model, LoraConfig(**config), adapter_name=first)
    for name, config in adapters[1:]:
        policy.add_adapter(name, LoraConfig(**config))
    return policy


def _load_weights(policy: PreTrainedModel, weights: dict[str, torch.Tensor], checkpoint: Path) -> None:
    """Copy the checkpoint's trainable tensors into ``policy`` by name; any name it lacks is an error."""
    own = dict(policy.named_parameters())
    unknown = sorted(set(weights) - set(own))
    if unknown:
        raise ExportError(f"checkpoint {checkpoint} does not fit the run's {POLICY_BASE}: it holds {unknown[:3]}, "
                          "which the rebuilt policy lacks")
    with torch.no_grad():
        for name, tensor in weights.items():
            own[name].copy_(tensor)


def _base_with_token_rows(policy: PeftModel, names: tuple[str, ...]) -> PreTrainedModel:
    """:func:`_unwrapped_base` with the trainable token rows of adapters ``names`` written in (the policy's
    active adapters and trainable flags are as they were afterwards: PEFT's ``set_adapter`` freezes others)."""
    trainable = {name: parameter.requires_grad for name, parameter in policy.named_parameters()}
    switch = nullcontext() if tuple(active_adapters(policy)) == names else using_adapters(policy, names)
    try:
        with switch, merged_trainable_tokens(policy):  # the rows in place, put back on leaving
            return _unwrapped_base(policy)
    finally:
        for name, parameter in policy.named_parameters():
            parameter.requires_grad_(trainable[name])


def _unwrapped_base(policy: PeftModel) -> PreTrainedModel:
    """A copy of the model under ``policy``'s LoRA layers and trainable-token wrappers, without them (``policy``
    is left as it is; token rows merged into its base weights are copied as they are)."""
    base = policy.get_base_model()
    clean = AutoModelForCausalLM.from_config(base.config, dtype=next(base.parameters()).dtype)
    state = {}
    for name, tensor in base.state_dict().items():
        if "lora_" in name or "trainable_tokens_" in name:
            continue
        state[name.replace(".token_adapter.base_layer.", ".").replace(".base_layer.", ".")] = tensor
    clean.load_state_dict(state, strict=False)
    missing = [n for n, _ in clean.named_parameters() if n not in state and not _tied(clean, n)]
    if missing:
        raise ExportError(f"could not separate the base model from its adapters: no weights for {missing[:3]}")
    clean.generation_config = base.generation_config
    return clean


def _tied(model: PreTrainedModel, name: str) -> bool:
    return name == "lm_head.weight" and bool(getattr(model.config, "tie_word_embeddings", False))


def _lora_dict(config: LoraConfig) -> dict[str, Any]:
    """``config`` as keyword arguments of ``LoraConfig`` (sets as lists, no PEFT bookkeeping fields)."""
    data = config.to_dict()
    for key in ("peft_type", "base_model_name_or_path", "revision", "runtime_config"):
        data.pop(key, None)
    return {k: sorted(v) if isinstance(v, set) else v for k, v in data.items()}


def _point_adapter_at_base(out: Path) -> None:
    config_file = out / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str((out / BASE_MODEL_DIR).resolve())
    config_file.write_text(json.dumps(config, indent=2) + "\n")
