"""Pieces every agent's checkpoint code shares: optimizer state as safetensors + JSON, and atomic directories."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

__all__ = ["atomic_directory", "optimizer_from_tensors", "optimizer_to_tensors"]


def optimizer_to_tensors(state_dict: dict[str, Any], prefix: str = "") -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into tensors (for safetensors) and a JSON-compatible structure.

    Tensor keys are ``"<prefix><param id>.<name>"``; non-tensor per-parameter values, the parameter ids and the
    param groups go into the structure. :func:`optimizer_from_tensors` inverts it.

    >>> p = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.Adam([p]); p.sum().backward(); opt.step()
    >>> tensors, structure = optimizer_to_tensors(opt.state_dict(), prefix="actor.")
    >>> sorted(tensors)
    ['actor.0.exp_avg', 'actor.0.exp_avg_sq', 'actor.0.step']
    >>> opt.load_state_dict(optimizer_from_tensors(tensors, structure, prefix="actor."))
    """
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, values in state_dict["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{prefix}{param_id}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(param_id), {})[name] = value
    structure = {
        "param_groups": state_dict["param_groups"],
        "param_ids": [str(k) for k in state_dict["state"]],
        "scalars": scalars,
    }
    return tensors, structure


def optimizer_from_tensors(tensors: dict[str, torch.Tensor], structure: dict, prefix: str = "") -> dict[str, Any]:
    """The ``optimizer.state_dict()`` that :func:`optimizer_to_tensors` split (other prefixes are ignored)."""
    state: dict[int, dict[str, Any]] = {
        int(k): dict(structure["scalars"].get(k, {})) for k in structure["param_ids"]
    }
    for key, value in tensors.items():
        if key.startswith(prefix):
            param_id, name = key[len(prefix):].split(".", 1)
            state[int(param_id)][name] = value
    return {"state": state, "param_groups": structure["param_groups"]}


@contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling directory to write into; on success it replaces ``final`` in one rename.

    A crash mid-write leaves ``final`` as it was (and a stale ``<final>.tmp`` that the next save clears), so a
    checkpoint directory is always either the old complete one or the new complete one.
    """
    final = Path(final)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
