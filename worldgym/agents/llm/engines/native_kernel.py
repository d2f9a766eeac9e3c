"""Builds and loads the project's C++ attention kernels for this CPU: ``decode_attention_kernel.cpp`` (one query
token behind a KV cache) and ``flash_attention_kernel.cpp`` (many query tokens, forward and backward).

Each kernel is compiled once per machine and environment with PyTorch's extension builder (a C++ compiler and
``ninja``), with the vector instructions the CPU has (AVX512-BF16, AVX512F or none), and kept in PyTorch's extension
cache (``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``): later processes load it in well under a
second. Two checkouts or virtual environments build their own copies (:func:`module_name`). Where one cannot be
built, :func:`native_kernel` warns once and returns None, and callers keep PyTorch's flash kernel.

Processes that build or load the same kernel at once take turns on an ``flock``, which the operating system drops
when its holder dies. PyTorch's own lock file is not dropped: a process killed while building (a deadline's
SIGTERM, a test's timeout) leaves it, and every later process would wait on it forever. Whoever holds the
``flock`` is the only one building, so a lock file found then is such a leftover, and is removed. A process
that waits on another's build for over :data:`BUILD_PATIENCE_S` does without the kernel (the warning above).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from worldgym.machine import cpu_flags

__all__ = ["KERNELS", "build_directory", "module_name", "native_kernel", "vector_flags"]

KERNELS = ("decode_attention", "flash_attention")  # each built from <name>_kernel.cpp beside this file
_AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma"]
BUILD_PATIENCE_S = 900.0  # how long a process waits for another's build of the same kernel before doing without
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


def module_name(name: str) -> str:
    """The built module's name for kernel ``name`` on this CPU: its vector level and a digest of its sources,
    where they are and which PyTorch it builds against. The build command names the sources' and PyTorch's
    paths, so two checkouts or environments sharing one extension cache would otherwise rebuild the same folder
    over each other's build at every switch."""
    import torch

    source = Path(__file__).with_name(f"{name}_kernel.cpp")
    headers = sorted(source.parent.glob("*.h"))  # shared by the kernels: a change to one builds them again
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in [source, *headers]))
    digest.update(f"{source.resolve()}|{Path(torch.__file__).resolve()}|{torch.__version__}".encode())
    return f"worldgym_{name}_{vector_flags(cpu_flags())[0]}_{digest.hexdigest()[:12]}"


def _build(name: str) -> ModuleType | None:
    source, built_name = Path(__file__).with_name(f"{name}_kernel.cpp"), module_name(name)
    try:
        from torch.utils.cpp_extension import load

        directory = build_directory(built_name)
        with _taking_turns(directory / "build.flock"):
            (directory / "lock").unlink(missing_ok=True)  # left by a process killed while building (see above)
            return load(name=built_name, sources=[str(source)], build_directory=str(directory), verbose=False,
                        extra_cflags=["-O3", "-std=c++17", *vector_flags(cpu_flags())[1]])
    except (RuntimeError, OSError, ImportError) as error:  # no ninja, no compiler, a failed build, a timeout
        first_line = str(error).splitlines()[0] if str(error) else ""
        warnings.warn(f"the native {name.replace('_', ' ')} could not be built ({type(error).__name__}: "
                      f"{first_line}); computing it with PyTorch's flash kernel", RuntimeWarning, stacklevel=3)
        return None


def build_directory(built_name: str) -> Path:
    """The folder the kernel module ``built_name`` (:func:`module_name`) is built and kept in, made if missing,
    where PyTorch's extension builder would put it: under ``TORCH_EXTENSIONS_DIR`` where set, else in its cache's
    folder for this Python and this build of torch (``py311_cpu``, ``py311_cu128``, ...)."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if root := os.environ.get("TORCH_EXTENSIONS_DIR"):
        directory = Path(root) / built_name
    else:
        build = (f"rocm{torch.version.hip}" if torch.version.hip else f"cu{torch.version.cuda}" if torch.version.cuda
                 else "cpu").replace(".", "")
        directory = Path(get_default_build_root()) / f"py{sys.version_info.major}{sys.version_info.minor}_{build}" \
            / built_name
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextmanager
def _taking_turns(path: Path, poll_s: float = 0.5) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the block: other processes wait, at most :data:`BUILD_PATIENCE_S`
    seconds (then :class:`TimeoutError`); a holder's death releases it."""
    patience_s = BUILD_PATIENCE_S
    with open(path, "a") as file:
        deadline = time.monotonic() + patience_s
        while True:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"another process has been building in {path.parent} for over "
                                       f"{patience_s:.0f} s") from None
                time.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)
