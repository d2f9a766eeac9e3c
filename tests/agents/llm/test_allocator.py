"""``map_large_allocations``: freed multi-MB tensors leave the process instead of staying in malloc's heap."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from worldgym.agents.llm.allocator import (
    map_large_allocations,
    map_large_allocations_on_cpu,
    release_free_heap_on_cpu,
)

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# 100 live 2 MB tensors, then all freed but the last: how many MB the process still holds of them
_HELD_AFTER_FREE = """
import sys, torch
from worldgym.agents.llm.allocator import map_large_allocations, release_free_heap
if sys.argv[1] == "mapped":
    assert map_large_allocations()
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
big = torch.ones(1 << 20)                    # a 4 MB block freed: glibc raises its threshold above 2 MB
del big
before = rss_mb()
tensors = [torch.ones(1 << 19) for _ in range(100)]   # 2 MB each, touched
del tensors[:-1]
if sys.argv[1] == "released":
    assert release_free_heap()
print(rss_mb() - before)
"""


def _held_mb(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", _HELD_AFTER_FREE, mode], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@glibc
def test_freed_large_tensors_leave_the_process_once_mapped():
    assert _held_mb("default") > 150  # glibc's heap keeps the 99 freed blocks below the live one
    assert _held_mb("mapped") < 20


@glibc
def test_releasing_the_free_heap_gives_back_blocks_below_a_live_one():
    assert _held_mb("released") < 20  # the heap's free pages go back, though the blocks stay heap blocks
    assert release_free_heap_on_cpu("cuda", True) is False and release_free_heap_on_cpu("cpu", False) is False
    assert release_free_heap_on_cpu("cpu", True) is True


@glibc
def test_only_cpu_runs_with_a_threshold_change_malloc():
    assert map_large_allocations_on_cpu("cuda", 1 << 20) is False
    assert map_large_allocations_on_cpu("cpu", None) is False
    assert map_large_allocations_on_cpu("cpu", 1 << 20) is True


# a decoding loop's pattern: eight 3 MB tensors allocated and freed 40 times; the pages faulted in meanwhile
_FAULTS_IN_A_LOOP = """
import resource, sys, torch
from worldgym.agents.llm.allocator import hold_free_heap
if sys.argv[1] == "held":
    assert hold_free_heap()
def step():
    tensors = [torch.ones(3 << 18) for _ in range(8)]
    return float(sum(t[0] for t in tensors))
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _FAULTS_IN_A_LOOP, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@glibc
def test_a_held_heap_reuses_its_pages_where_glibc_trims_and_faults_them_in_again():
    # a step touches 24 MB (6,144 pages): glibc as it starts trims them from the heap's top and faults them in
    # again at every step (~245,000 faults over the 40), a held heap at most once
    assert _faults("held") <= 6_144 and _faults("default") > 20 * 6_144


def test_only_the_smollm2_preset_releases_the_heap_and_none_maps_large_allocations():
    from worldgym.agents.grpo import GRPOConfig, grpo_preset

    config = GRPOConfig()
    assert config.cpu_mmap_threshold is None and config.cpu_release_heap is False  # malloc as it is, unless asked
    tiny = grpo_preset("CSRPhone-v1", "tiny").grpo_config(1)
    assert tiny.cpu_mmap_threshold is None and tiny.cpu_release_heap is False
    smollm2 = grpo_preset("CSRPhone-v1", "smollm2-135m").grpo_config(3)
    assert smollm2.cpu_mmap_threshold is None and smollm2.cpu_release_heap is True


def test_a_threshold_must_be_positive():
    from worldgym.agents.grpo import GRPOConfig

    with pytest.raises(ValueError, match="threshold must be positive"):
        map_large_allocations(0)
    with pytest.raises(ValueError, match="cpu_mmap_threshold"):
        GRPOConfig(cpu_mmap_threshold=0)
