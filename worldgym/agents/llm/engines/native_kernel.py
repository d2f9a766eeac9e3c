"""Builds and loads the project's C++ attention kernels for this CPU: ``decode_attention_kernel.cpp`` (one query
token behind a KV cache) and ``flash_attention_kernel.cpp`` (many query tokens, forward and backward).

Each kernel is compiled once per machine with PyTorch's extension builder (a C++ compiler and ``ninja``), with
the vector instructions the CPU has (AVX512-BF16, AVX512F or none), and kept in PyTorch's extension cache
(``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``): later processes load it in well under a
second. Where one cannot be built, :func:`native_kernel` warns once and returns None, and callers keep PyTorch's
flash kernel.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from types import ModuleType

from worldgym.machine import cpu_flags

__all__ = ["KERNELS", "native_kernel", "vector_flags"]

KERNELS = ("decode_attention", "flash_attention")  # each built from <name>_kernel.cpp beside this file
_AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma"]
_built: dict[str, ModuleType | None] = {}


def vector_flags(flags: frozenset[str]) -> tuple[str, list[str]]:
    """A name for the CPU's vector level and the compiler flags that target it, from its feature ``flags``."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"} <= flags:
        return "avx512bf16", [*_AVX512, "-mavx512bf16"]
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        return "avx512", _AVX512
    if {"avx2", "fma"} <= flags:
        return "avx2", ["-mavx2", "-mfma"]
    return "generic", []


def native_kernel(name: str = "decode_attention") -> ModuleType | None:
    """The compiled kernel module ``name`` (one of :data:`KERNELS`), built on first use; None, after one
    ``RuntimeWarning`` naming the cause, where building or loading failed (no compiler, no ninja)."""
    if name not in KERNELS:
        raise ValueError(f"native kernel must be one of {KERNELS}, got {name!r}")
    if name not in _built:
        _built[name] = _build(name)
    return _built[name]


def _build(name: str) -> ModuleType | None:
    source = Path(__file__).with_name(f"{name}_kernel.cpp")
    level, flags = vector_flags(cpu_flags())
    headers = sorted(source.parent.glob("*.h"))  # shared by the kernels: a change to one builds them again
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in [source, *headers])).hexdigest()[:12]
    try:
        from torch.utils.cpp_extension import load

        return load(name=f"worldgym_{name}_{level}_{digest}", sources=[str(source)],
                    extra_cflags=["-O3", "-std=c++17", *flags], verbose=False)
    except (RuntimeError, OSError, ImportError) as error:  # no ninja, no compiler, a failed build
        first_line = str(error).splitlines()[0] if str(error) else ""
        warnings.warn(f"the native {name.replace('_', ' ')} could not be built ({type(error).__name__}: "
                      f"{first_line}); computing it with PyTorch's flash kernel", RuntimeWarning, stacklevel=3)
        return None
