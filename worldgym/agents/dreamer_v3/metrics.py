"""JSONL metric logging and fail-fast checks that write a failure bundle before raising."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from worldgym.errors import WorldgymError


class TrainingFailure(WorldgymError, RuntimeError):
    """A fail-fast check tripped; ``bundle`` is the folder holding what was written for debugging."""

    def __init__(self, message: str, bundle: Path) -> None:
        super().__init__(f"{message} (failure bundle: {bundle})")
        self.bundle = bundle


def to_float(value: Any) -> Any:
    """Tensors and numpy scalars to Python floats (this syncs a device: call it only at log time)."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def write_failure_bundle(
    run_dir: str | Path, reason: str, context: dict[str, Any], tensors: dict[str, torch.Tensor]
) -> Path:
    """Write ``reason.json`` and ``tensors.safetensors`` to ``run_dir/failure_<ms>``; return the folder."""
    bundle = Path(run_dir) / f"failure_{int(time.time() * 1000)}"
    bundle.mkdir(parents=True, exist_ok=True)
    payload = {"reason": reason, "context": {k: to_float(v) for k, v in context.items()}, "time": time.time()}
    (bundle / "reason.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    if tensors:
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in tensors.items()},
            str(bundle / "tensors.safetensors"),
        )
    return bundle


def check_metrics(
    metrics: dict[str, Any], run_dir: str | Path, context: dict[str, Any], batch: dict[str, torch.Tensor]
) -> None:
    """Raise :class:`TrainingFailure` (after writing a bundle) if any metric is not finite."""
    bad = {
        k: v
        for k, v in ((k, to_float(v)) for k, v in metrics.items())
        if isinstance(v, float) and not math.isfinite(v)
    }
    if bad:
        bundle = write_failure_bundle(run_dir, f"non-finite metrics {sorted(bad)}", context | metrics, batch)
        raise TrainingFailure(f"non-finite metrics {bad}", bundle)


def check_batch(
    batch: dict[str, torch.Tensor],
    expected: dict[str, tuple[tuple[int, ...], torch.device]],
    run_dir: str | Path,
) -> None:
    """Raise :class:`TrainingFailure` if a batch field has the wrong shape or device, or non-finite floats."""
    for name, (shape, device) in expected.items():
        value = batch[name]
        problem = None
        if tuple(value.shape) != shape:
            problem = f"field {name!r} has shape {tuple(value.shape)}, expected {shape}"
        elif not _same_device(value.device, torch.device(device)):
            problem = f"field {name!r} is on {value.device}, expected {device}"
        elif value.is_floating_point() and not bool(torch.isfinite(value).all()):
            problem = f"field {name!r} holds non-finite values"
        if problem:
            bundle = write_failure_bundle(run_dir, problem, {}, batch)
            raise TrainingFailure(problem, bundle)


def _same_device(actual: torch.device, expected: torch.device) -> bool:
    """Whether ``actual`` is ``expected``; an expected device without an index ("cuda") takes any index (a
    tensor made on "cuda" reports "cuda:0")."""
    return actual.type == expected.type and (expected.index is None or actual.index == expected.index)
