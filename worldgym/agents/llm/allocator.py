"""Keep a CPU training process's memory near its live tensors: large blocks mapped, not kept in the heap.

glibc's ``malloc`` serves a block below its *mmap threshold* from its heap and one above it with a mapping of its
own, given back to the system when freed. After each such free it raises the threshold to that block's size (up
to 32 MB), so a backward pass over a few-thousand-token sequence, which allocates and frees many 1-30 MB
tensors, soon takes them all from the heap, where freed blocks between live ones stay in the process: a SmolLM2
dual-LoRA run on CPU was OOM-killed at 17 GB in its update. A fixed threshold maps every large block and turns
the raising off, at the price of fresh, zeroed pages for every large tensor; releasing the heap's free pages
between passes (``malloc_trim``) keeps the heap's speed and gives the freed memory back
(``benchmarks/cpu_allocator_memory.py`` measures them).

Between those releases glibc also trims its heap by itself: whenever the free memory at the heap's top passes
the trim threshold it gives that memory back, and the next allocation faults fresh pages in again.
:func:`hold_free_heap` turns that trimming off. On a sampled SmolLM2 rollout it cut the page faults 3.5x and
the kernel's seconds 2.9x, but not the process's CPU seconds (``benchmarks/csr_rollout_speed.py --compare
heap``), so the trainers leave it off.
"""

from __future__ import annotations

import ctypes
import functools
import sys

__all__ = ["DEFAULT_MMAP_THRESHOLD", "HELD_MMAP_THRESHOLD", "hold_free_heap", "map_large_allocations",
           "map_large_allocations_on_cpu", "release_free_heap", "release_free_heap_on_cpu"]

DEFAULT_MMAP_THRESHOLD = 1 << 20  # bytes
HELD_MMAP_THRESHOLD = 32 << 20  # bytes: the ceiling glibc raises its own threshold to on 64-bit systems
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_NEVER_TRIM = 2**31 - 1  # the largest trim threshold mallopt's int takes


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, where this process runs on it (None elsewhere: not Linux, or another C library such as musl);
    opened once (the trainers release the heap after every microbatch)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def release_free_heap() -> bool:
    """Give the free pages of malloc's heap back to the system (``malloc_trim(0)``): the memory of freed
    tensors leaves the process, while malloc keeps serving large tensors from its heap (no fresh, zeroed pages
    for each, as :func:`map_large_allocations` costs). Returns False where glibc is not there."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def map_large_allocations(threshold: int = DEFAULT_MMAP_THRESHOLD) -> bool:
    """Ask glibc to give every block of at least ``threshold`` bytes a mapping of its own, returned to the
    system when it is freed (``mallopt(M_MMAP_THRESHOLD, threshold)``, process-wide; the environment variable
    ``MALLOC_MMAP_THRESHOLD_`` does the same from the start). Returns False where that is not possible (not
    Linux, not glibc, or a threshold glibc refuses: above 32 MB on 64-bit systems)."""
    if threshold <= 0:
        raise ValueError(f"threshold must be positive, got {threshold}")
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def hold_free_heap(mmap_threshold: int = HELD_MMAP_THRESHOLD) -> bool:
    """Keep freed memory in malloc's heap until :func:`release_free_heap` gives it back: glibc stops trimming
    the heap's top by itself (``M_TRIM_THRESHOLD`` at its largest), so a block freed and allocated again at
    every decoding step reuses its pages. Fixing one threshold turns off glibc's raising of the other, so blocks
    from ``mmap_threshold`` bytes up (by default 32 MB, the ceiling glibc raises its own to) still get mappings
    of their own. Process-wide; returns False where that is not possible (not Linux, not glibc)."""
    libc = _glibc()
    return map_large_allocations(mmap_threshold) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))


def map_large_allocations_on_cpu(device: str, threshold: int | None) -> bool:
    """What the trainers do at construction: :func:`map_large_allocations` ``(threshold)`` when they train on
    the CPU and ``threshold`` is set (on a GPU the tensors are not malloc's); whether it was applied."""
    return device == "cpu" and threshold is not None and map_large_allocations(threshold)


def release_free_heap_on_cpu(device: str, release: bool) -> bool:
    """What the trainers do between microbatches and after rollouts: :func:`release_free_heap` when they train
    on the CPU and ``release`` is set; whether it was done."""
    return device == "cpu" and release and release_free_heap()
