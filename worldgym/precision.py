"""Numeric precision: one ``dtype`` setting ("auto" | "float32" | "bfloat16") shared by every trainer.

Mixed precision as the library runs it: frozen (base) weights are stored in the compute dtype, trainable
tensors (LoRA, cartridges, heads) and their optimizer state stay in float32, and forward passes run under
``torch.autocast`` so matrix products use the compute dtype (on CPUs with AMX, bfloat16 matmuls run ~8x faster
than float32). Logits, log-softmax, losses and advantages are computed in float32 by the callers.

``"auto"`` picks bfloat16 where the hardware computes it natively (a CPU with AMX-BF16 or AVX512-BF16, a CUDA
device that supports bf16) and float32 elsewhere; float32 remains the choice for exact comparisons (the
engine's sampled logprobs then equal the learner's to the last bit). An explicit ``"bfloat16"`` on a CPU without
native bf16 still runs, with one :class:`EmulatedBF16Warning`: its matmuls are emulated there, tens of times
slower than float32.

>>> resolve_dtype("float32", "cpu")
torch.float32
>>> resolve_dtype("bfloat16", "cpu")
torch.bfloat16
>>> dtype_name(torch.bfloat16)
'bfloat16'
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Literal

import torch

from worldgym.machine import cpu_flags, cpu_isa, cpu_model, onednn_cap

__all__ = [
    "PRECISIONS",
    "EmulatedBF16Warning",
    "Precision",
    "autocast",
    "cast_for_training",
    "check_precision",
    "compute_dtype",
    "cpu_supports_bf16",
    "dtype_name",
    "recomputes_old_logprobs",
    "resolve_dtype",
]

Precision = Literal["auto", "float32", "bfloat16"]
PRECISIONS: tuple[str, ...] = ("auto", "float32", "bfloat16")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# CPU flags that mean native bf16 matrix instructions (lscpu / /proc/cpuinfo names)
_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


class EmulatedBF16Warning(UserWarning):
    """``dtype="bfloat16"`` was asked for on a CPU that has no native bf16 matrix instructions."""


def check_precision(name: str, value: object) -> None:
    """Raise ``ValueError`` naming the field unless ``value`` is one of :data:`PRECISIONS`."""
    if value not in PRECISIONS:
        raise ValueError(f"{name}={value!r} is invalid: use one of {list(PRECISIONS)}")


@functools.cache
def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (AMX-BF16 or AVX512-BF16) that torch's kernels may
    use: the kernel's ``/proc/cpuinfo`` flags, unless ``ONEDNN_MAX_CPU_ISA`` caps the matmul kernels below them.
    """
    capped = (onednn_cap() or "").upper()
    if capped and capped != "ALL" and not any(name in capped for name in ("BF16", "AMX", "AVX10")):
        return False
    return any(flag in cpu_flags() for flag in _BF16_CPU_FLAGS)


@functools.cache
def warn_if_bf16_emulated() -> None:
    """Warn once per process (an :class:`EmulatedBF16Warning`) that bf16 on this CPU is emulated, naming the CPU
    and its ISA level; nothing on a CPU with native bf16. Called whenever a setting asks for bf16 on the CPU."""
    if cpu_supports_bf16():
        return
    warnings.warn(
        f'dtype="bfloat16" on a CPU without native bf16 ({cpu_model()}, ISA level {cpu_isa()}, no AMX-BF16 or '
        "AVX512-BF16): its bf16 matrix products are emulated and run tens of times slower than float32 "
        '(docs/precision.md); dtype="auto" picks float32 here. Running on in bfloat16 as asked.',
        EmulatedBF16Warning, stacklevel=3,
    )


def resolve_dtype(precision: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """The compute dtype that ``precision`` means on ``device`` ("auto": bfloat16 where it is native)."""
    if isinstance(precision, torch.dtype):
        if precision not in _DTYPES.values():
            raise ValueError(f"dtype {precision} is not supported: use torch.float32 or torch.bfloat16")
        return precision
    check_precision("dtype", precision)
    device = torch.device(device)
    if precision != "auto":
        if precision == "bfloat16" and device.type == "cpu":
            warn_if_bf16_emulated()
        return _DTYPES[precision]
    if device.type == "cuda":
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    else:
        native = device.type == "cpu" and cpu_supports_bf16()
    return torch.bfloat16 if native else torch.float32


def recomputes_old_logprobs(setting: bool | None, dtype: torch.dtype) -> bool:
    """Whether a PPO learner scores its rollouts again before updating (``setting``; None: only when computing
    in a reduced precision, where the sampler's logprobs and the learner's differ by rounding).

    >>> recomputes_old_logprobs(None, torch.bfloat16), recomputes_old_logprobs(None, torch.float32)
    (True, False)
    """
    return dtype != torch.float32 if setting is None else setting


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the spelling configs and results JSON use)."""
    return str(dtype).removeprefix("torch.")


def autocast(dtype: torch.dtype, device: str | torch.device = "cpu") -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s type, or a no-op context for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def cast_for_training(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Store ``model``'s frozen floating tensors in ``dtype`` and its trainable ones in float32, in place.

    Frozen weights are only read (under autocast they would be cast to ``dtype`` on every use anyway);
    trainable tensors keep float32 so small updates are not rounded away and the optimizer state is float32.
    Buffers (e.g. rotary frequencies) are left as they are. Returns ``model``.
    """
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.is_floating_point():
                continue
            target = torch.float32 if parameter.requires_grad else dtype
            if parameter.dtype != target:
                parameter.data = parameter.data.to(target)
    return model


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype a model prepared by :func:`cast_for_training` computes in: that of its frozen floating
    weights (float32 when every weight is trainable or float32)."""
    for parameter in model.parameters():
        if parameter.is_floating_point() and not parameter.requires_grad and parameter.dtype != torch.float32:
            return parameter.dtype
    return torch.float32


@contextlib.contextmanager
def model_autocast(
    model: torch.nn.Module, device: str | torch.device | None = None, dtype: torch.dtype | None = None
) -> Iterator[None]:
    """Autocast to ``dtype`` (default: ``model``'s :func:`compute_dtype`) on ``device`` (default: the model's);
    a no-op for float32.

    Under bf16, PEFT adapter layers also stop casting their input to their float32 weights' dtype: autocast
    runs their products in bf16 anyway, and the casts back and forth were ~12% of a SmolLM2 LoRA
    forward + backward. Not while activations are checkpointed (a training forward with gradients of a model
    whose layers recompute in the backward pass): the recomputation runs outside this block, with the
    layers casting again, and must produce the tensors the forward saved.
    """
    dtype = dtype or compute_dtype(model)
    if device is None:
        device = next(model.parameters()).device
    casts_off = dtype != torch.float32 and not _recomputes_activations(model)
    with autocast(dtype, device), _adapter_casts_off(model, casts_off):
        yield


def _recomputes_activations(model: torch.nn.Module) -> bool:
    """Whether a forward now would be recomputed in the backward pass (activation checkpointing on, training
    mode, gradients enabled)."""
    if not (model.training and torch.is_grad_enabled()):
        return False
    return any(getattr(module, "gradient_checkpointing", False) is True for module in model.modules())


@contextlib.contextmanager
def _adapter_casts_off(model: torch.nn.Module, active: bool) -> Iterator[None]:
    """Switch off PEFT adapter layers' input casting (``cast_input_dtype_enabled``) for the block, restoring each
    layer's setting after it. (PEFT's own ``disable_input_dtype_casting`` reads the attribute from layers that
    may lack it, e.g. trainable-token layers.)"""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:  # no PEFT installed: no adapter layers to switch
        BaseTunerLayer = ()
    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)] if active else []
    saved = [layer.__dict__.get("cast_input_dtype_enabled") for layer in layers]
    for layer in layers:
        layer.cast_input_dtype_enabled = False
    try:
        yield
    finally:
        for layer, value in zip(layers, saved, strict=True):
            if value is None:
                del layer.cast_input_dtype_enabled
            else:
                layer.cast_input_dtype_enabled = value


__all__ += ["model_autocast", "warn_if_bf16_emulated"]
