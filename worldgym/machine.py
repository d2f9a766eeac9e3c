"""The machine a figure was made on: CPU model, cores, instruction-set level, native bf16, GPU, versions, load.

Speed figures from different CPUs are not comparable (a bf16 matmul is ~5x faster than float32 on a CPU with
AVX512-BF16 and tens of times slower on one without native bf16), so every results file records
:func:`machine_info`, and tables show :func:`machine_label` beside each figure.

>>> sorted(machine_info())[:4]
['amx_bf16', 'avx512_bf16', 'cpu_count', 'cpu_isa']
>>> machine_label({"cpu_model": "AMD EPYC", "cpu_isa": "AVX2", "amx_bf16": False, "avx512_bf16": False,
...                "cpu_count": 2})
'AMD EPYC, AVX2, no native bf16, 2 cores'
>>> isa_label({"cpu_isa": "AVX512", "amx_bf16": False, "avx512_bf16": True})
'AVX512 + AVX512-BF16'
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

__all__ = ["cpu_flags", "cpu_isa", "cpu_model", "isa_label", "machine_info", "machine_kind", "machine_label",
           "onednn_cap"]

_CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def _cpuinfo_fields() -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``/proc/cpuinfo`` (empty where there is none)."""
    if not _CPUINFO.is_file():
        return {}
    fields: dict[str, str] = {}
    for line in _CPUINFO.read_text(errors="replace").splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the kernel names them (``avx2``, ``avx512_bf16``, ``amx_bf16``, ...)."""
    return frozenset(_cpuinfo_fields().get("flags", "").split())


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` says."""
    return _cpuinfo_fields().get("model name") or platform.processor() or platform.machine() or "unknown"


def cpu_isa() -> str:
    """The vector instruction set torch's CPU kernels use here (``"AVX2"``, ``"AVX512"``, ...), or ``"unknown"``
    without torch. ``ATEN_CPU_CAPABILITY`` caps it."""
    try:
        import torch
    except ImportError:
        return "unknown"
    return torch.backends.cpu.get_cpu_capability()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def onednn_cap() -> str | None:
    """``ONEDNN_MAX_CPU_ISA`` when set: matmul kernels then use no more than that ISA, whatever the CPU has."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")


def machine_info() -> dict[str, Any]:
    """Everything a results file records about the machine: CPU model, core count, ISA level, AMX-BF16 and
    AVX512-BF16 presence, Python/torch/transformers versions and the 1-minute load average now."""
    flags = cpu_flags()
    info: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_isa": cpu_isa(),
        "amx_bf16": "amx_bf16" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    if (capped := onednn_cap()) is not None:
        info["onednn_max_cpu_isa"] = capped
    if (gpu := _cuda_device()) is not None:
        info["cuda_device"] = gpu
    return info


def _cuda_device() -> str | None:
    """The first CUDA device's name where torch sees one (figures made on a GPU name it), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def machine_kind(info: dict[str, Any]) -> str:
    """A short name for what decides bf16 speed on a CPU: ``"amx"``, ``"avx512-bf16"``, or the ISA level
    (``"avx2"``) when bf16 is not native; kernels capped by ``ONEDNN_MAX_CPU_ISA`` give ``"capped-avx2"`` (a
    stand-in, never to be taken for the real kind). Keys per-machine results."""
    capped = info.get("onednn_max_cpu_isa")
    if capped:
        return "capped-" + capped.lower().replace("_", "-")
    if info.get("amx_bf16"):
        return "amx"
    if info.get("avx512_bf16"):
        return "avx512-bf16"
    return str(info.get("cpu_isa", "unknown")).lower()


def isa_label(info: dict[str, Any] | None) -> str:
    """What decides speed, in a few words: ``"AVX512 + AVX512-BF16"``, ``"AVX2, no native bf16"``, ``"capped to
    AVX2"`` (``"not recorded"`` for None)."""
    if not info:
        return "not recorded"
    if capped := info.get("onednn_max_cpu_isa"):
        return f"capped to {capped}"
    if info.get("amx_bf16"):
        bf16 = " + AMX-BF16"
    elif info.get("avx512_bf16"):
        bf16 = " + AVX512-BF16"
    else:
        bf16 = ", no native bf16"
    return f"{info.get('cpu_isa', '?')}{bf16}"


def machine_label(info: dict[str, Any] | None) -> str:
    """One line for a table: ``"AMD EPYC, AVX512 + AVX512-BF16, 2 cores"`` (``"not recorded"`` for None)."""
    if not info:
        return "not recorded"
    gpu = f", {info['cuda_device']}" if info.get("cuda_device") else ""
    return f"{info.get('cpu_model', '?')}, {isa_label(info)}, {info.get('cpu_count', '?')} cores{gpu}"
