"""The native (C++) decode attention: float32 attention's values on strided cache views in both dtypes, with
and without masks (hidden blocks, a ragged tail), the same result on any number of threads, and a clear fallback
where it cannot be built."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from worldgym.agents.llm.engines import decode_attention, native_kernel
from worldgym.agents.llm.engines.decode_attention import (
    decode_attention_forward,
    native_decode_attention_forward,
)

built = native_kernel.native_kernel() is not None
needs_kernel = pytest.mark.skipif(not built, reason="the native decode attention could not be built here")


def _module() -> torch.nn.Module:
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    return module


def _inputs(dtype: torch.dtype, dim: int, length: int, mask: str) -> tuple[torch.Tensor, ...]:
    """query [4, 9, 1, dim] and key/value views [4, 3, length, dim] into longer buffers, and a mask of the kind
    named: none, boolean (row 0 hides 37 leading positions: two whole blocks and part of a third; row 2 a run in
    the middle) or additive."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(4, 9, 1, dim, generator=generator).to(dtype)
    key, value = (torch.randn(4, 3, length + 20, dim, generator=generator).to(dtype)[:, :, :length] for _ in range(2))
    if mask == "none":
        return query, key, value, None
    keep = torch.ones(4, 1, 1, length, dtype=torch.bool)
    keep[0, ..., :37] = False
    keep[2, ..., 16:48] = False
    if mask == "bool":
        return query, key, value, keep
    return query, key, value, torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


@needs_kernel
@pytest.mark.parametrize("mask", ["none", "bool", "additive"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dim", [64, 24])  # 64: the vector paths; 24: the plain loops
def test_the_native_kernel_equals_float32_attention_on_strided_views(dtype: torch.dtype, dim: int, mask: str
                                                                     ) -> None:
    query, key, value, attention_mask = _inputs(dtype, dim, 83, mask)
    out, _ = native_decode_attention_forward(_module(), query, key, value, attention_mask, scaling=0.2)
    reference_mask = attention_mask if attention_mask is None or attention_mask.dtype == torch.bool \
        else attention_mask.float()
    reference, _ = sdpa_attention_forward(_module(), query.float(), key.float(), value.float(), reference_mask,
                                          scaling=0.2)
    assert out.dtype == dtype and out.shape == reference.shape == (4, 1, 9, dim)
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-5  # bf16: the output's rounding only
    torch.testing.assert_close(out.float(), reference, atol=tolerance, rtol=0)


@needs_kernel
@pytest.mark.parametrize("groups", [1, 3, 5, 8])  # value sums in register tiles of up to 4 groups
@pytest.mark.parametrize("dim", [64, 128, 96, 80])  # SmolLM2's, Qwen3's, a 32-value tail tile, and 16s not 32s
def test_every_group_size_and_head_dim_attends_as_float32_attention(groups: int, dim: int) -> None:
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(2, 2, groups, dim, generator=generator).bfloat16()
    key, value = (torch.randn(2, 2, 70, dim, generator=generator).bfloat16() for _ in range(2))
    mask = torch.zeros(2, 70)
    mask[1, :40] = float("-inf")  # two hidden blocks and part of a third
    out = native_kernel.native_kernel().decode_attention(query, key, value, mask, 0.1)
    weights = (query.float() @ key.float().transpose(-1, -2) * 0.1 + mask[:, None, None]).softmax(-1)
    torch.testing.assert_close(out.float(), weights @ value.float(), atol=1e-2, rtol=0)


@needs_kernel
def test_the_native_kernel_gives_the_same_bits_on_one_thread_and_on_two() -> None:
    query, key, value, mask = _inputs(torch.bfloat16, 64, 300, "bool")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = native_decode_attention_forward(_module(), query, key, value, mask, scaling=0.125)
        torch.set_num_threads(2)
        two, _ = native_decode_attention_forward(_module(), query, key, value, mask, scaling=0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


@needs_kernel
def test_the_native_kernel_rejects_mismatched_inputs() -> None:
    kernel = native_kernel.native_kernel()
    query, key, value, _ = _inputs(torch.bfloat16, 64, 40, "none")
    folded = query.reshape(4, 3, 3, 64)
    with pytest.raises(RuntimeError, match="share a dtype"):
        kernel.decode_attention(folded, key.float(), value.float(), torch.empty(0), 0.1)
    with pytest.raises(RuntimeError, match="mask must be float32"):
        kernel.decode_attention(folded, key, value, torch.zeros(4, 39), 0.1)
    with pytest.raises(RuntimeError, match="contiguous head dimensions"):
        kernel.decode_attention(folded, key.transpose(2, 3).contiguous().transpose(2, 3), value, torch.empty(0), 0.1)


def test_a_failed_build_warns_once_and_decodes_with_the_flash_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_load(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Ninja is required to load C++ extensions\nmore lines")

    monkeypatch.setattr(native_kernel, "_built", {})
    monkeypatch.setattr("torch.utils.cpp_extension.load", failing_load)
    query, key, value, mask = _inputs(torch.bfloat16, 64, 40, "bool")
    with pytest.warns(RuntimeWarning, match="could not be built .*Ninja is required.*\\); computing it with PyTorch.s flash"):
        out, _ = native_decode_attention_forward(_module(), query, key, value, mask, scaling=0.25)
    expected, _ = decode_attention_forward(_module(), query, key, value, mask, scaling=0.25)
    assert torch.equal(out, expected)
    again, _ = native_decode_attention_forward(_module(), query, key, value, mask, scaling=0.25)
    assert torch.equal(again, expected)  # no second warning: pytest's -W error would fail on one


@needs_kernel
def test_a_lock_file_left_by_a_killed_build_does_not_stop_the_next_process(tmp_path: Path) -> None:
    built_in = Path(native_kernel.native_kernel().__file__).parent  # type: ignore[union-attr]
    extensions = tmp_path / "extensions"
    shutil.copytree(built_in, extensions / built_in.name)  # the built kernel, its times kept: nothing to rebuild
    (extensions / built_in.name / "lock").touch()  # PyTorch's lock file, as a build killed midway leaves it
    code = "from worldgym.agents.llm.engines.native_kernel import native_kernel; print(native_kernel() is not None)"
    loaded = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions)},
                            capture_output=True, text=True, timeout=300, check=False)
    assert loaded.stdout.strip() == "True", loaded.stderr[-2000:]
    assert not (extensions / built_in.name / "lock").exists()


def test_a_process_that_waits_too_long_on_another_build_does_without_the_kernel(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    monkeypatch.setattr(native_kernel, "_built", {})
    monkeypatch.setattr(native_kernel, "BUILD_PATIENCE_S", 1.0)
    turn = native_kernel.build_directory(native_kernel.module_name("decode_attention")) / "build.flock"
    with open(turn, "a") as building:  # another build of the same kernel, still going
        fcntl.flock(building, fcntl.LOCK_EX)
        with pytest.warns(RuntimeWarning, match="could not be built \\(TimeoutError: another process has been building"):
            assert native_kernel.native_kernel() is None
    assert native_kernel._built == {"decode_attention": None}  # decided once per process


def test_another_pytorch_install_builds_its_own_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    here = native_kernel.module_name("decode_attention")
    assert here == native_kernel.module_name("decode_attention")  # a name that stays: the build is found again
    monkeypatch.setattr(torch, "__file__", "/elsewhere/venv/lib/python3.11/site-packages/torch/__init__.py")
    elsewhere = native_kernel.module_name("decode_attention")
    assert elsewhere != here and elsewhere.rsplit("_", 1)[0] == here.rsplit("_", 1)[0]


@pytest.mark.parametrize(("flags", "level"), [
    ({"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx2", "fma"}, "avx512bf16"),
    ({"avx512f", "avx512bw", "avx512vl", "avx2", "fma"}, "avx512"),
    ({"avx2", "fma"}, "avx2"),
    ({"sse4_2"}, "generic"),
])
def test_the_kernel_is_built_for_the_cpu_it_runs_on(flags: set[str], level: str) -> None:
    name, compiler_flags = native_kernel.vector_flags(frozenset(flags))
    assert name == level
    assert ("-mavx512bf16" in compiler_flags) == (level == "avx512bf16")
    assert ("-mavx512f" in compiler_flags) == level.startswith("avx512")


def test_decoding_off_the_fast_path_defers_to_sdpa() -> None:
    query, key, value, mask = _inputs(torch.bfloat16, 64, 40, "bool")
    prefill = query.expand(4, 9, 2, 64)  # two query tokens: not a decode step
    out, _ = decode_attention.native_decode_attention_forward(_module(), prefill, key, value, mask, scaling=0.25)
    expected, _ = sdpa_attention_forward(_module(), prefill, key, value, mask, scaling=0.25)
    assert torch.equal(out, expected)
