"""The native (C++) flash attention for many query tokens: float32 attention's values and gradients (causal
training passes, masked prefill behind a cache, grouped heads), zeros for a query that sees nothing, the same
bits on any number of threads, clear refusals, and which calls the model's native attention sends to it."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from worldgym.agents.llm.engines import flash_attention as flash
from worldgym.agents.llm.engines.decode_attention import native_attention_forward
from worldgym.agents.llm.engines.flash_attention import flash_attention, handles_many_tokens
from worldgym.agents.llm.engines.native_kernel import native_kernel

needs_kernel = pytest.mark.skipif(native_kernel("flash_attention") is None,
                                  reason="the native flash attention could not be built here")


def _module(groups: int) -> torch.nn.Module:
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = groups, True
    return module


def _inputs(batch: int, heads: int, kv_heads: int, queries: int, keys: int, dim: int,
            seed: int = 0) -> tuple[torch.Tensor, ...]:
    """bf16 query ``[B, H, T, D]`` and key/value ``[B, H_kv, S, D]`` as transformers passes them: transposed
    views of ``[B, T, H, D]`` projections (strided, last dim contiguous); all require gradients."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, queries, heads, dim, generator=generator).bfloat16().transpose(1, 2)
    key, value = (torch.randn(batch, keys, kv_heads, dim, generator=generator).bfloat16().transpose(1, 2)
                  for _ in range(2))
    return tuple(t.requires_grad_() for t in (query, key, value))


def _reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
               causal: bool) -> torch.Tensor:
    """float32 attention ``[B, T, H, D]`` with the same visibility rule (a query that sees nothing gives 0)."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = query @ key.transpose(-1, -2) * query.shape[-1] ** -0.5
    queries, keys = query.shape[2], key.shape[2]
    visible = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries) if causal else \
        torch.ones(queries, keys, dtype=torch.bool)
    visible = visible[None, None] if mask is None else visible & mask
    probs = scores.masked_fill(~visible, float("-inf")).softmax(-1).nan_to_num(0.0)
    return (probs @ value).transpose(1, 2)


def _padded_prefill_mask(batch: int, queries: int, keys: int, padding: int = 40) -> torch.Tensor:
    """A prefill mask behind a cache, as the engine's layouts make it: causal, row 0 left-padded by ``padding`` key
    positions (its first 3 queries are padding and see nothing), row 1 with a hole of 20 cached positions."""
    mask = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries).expand(batch, 1, queries, keys).clone()
    mask[0, :, :, :padding] = False
    mask[0, :, :3] = False
    mask[1, :, :, 50:70] = False
    return mask


CASES = {  # batch, heads, kv heads, queries, keys, head dim, mask, causal
    "causal training pass": (2, 6, 2, 150, 150, 64, None, True),
    "masked prefill behind a cache": (2, 9, 3, 70, 230, 64, "prefill", False),
    "whole blocks of padding": (2, 9, 3, 70, 600, 64, "long padding", False),
    "one mask for all rows, wide heads": (3, 4, 4, 40, 140, 128, "shared", False),
    "narrow heads": (1, 2, 1, 130, 130, 32, None, True),
}


@needs_kernel
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_equal_float32_attention(case: str) -> None:
    batch, heads, kv_heads, queries, keys, dim, kind, causal = CASES[case]
    query, key, value = _inputs(batch, heads, kv_heads, queries, keys, dim)
    mask = None
    if kind == "prefill":
        mask = _padded_prefill_mask(batch, queries, keys)
    elif kind == "long padding":  # row 0's first 300 keys: two whole key blocks no query of row 0 sees
        mask = _padded_prefill_mask(batch, queries, keys, padding=300)
    elif kind == "shared":
        mask = torch.rand(1, 1, queries, keys, generator=torch.Generator().manual_seed(1)) > 0.3
    out = flash_attention(query, key, value, mask, causal=causal)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).bfloat16()
    out.backward(grad_out)
    exact = [t.detach().float().requires_grad_() for t in (query, key, value)]
    reference = _reference(*exact, mask, causal)
    reference.backward(grad_out.float())
    assert out.dtype == torch.bfloat16 and out.shape == (batch, queries, heads, dim)
    torch.testing.assert_close(out.float(), reference, atol=2e-2, rtol=0)  # bf16 rounding of the output
    for tensor, float32 in zip((query, key, value), exact):
        assert tensor.grad.shape == tensor.shape
        scale = float32.grad.abs().max()
        torch.testing.assert_close(tensor.grad.float() / scale, float32.grad / scale, atol=2e-2, rtol=0)


@needs_kernel
def test_a_query_that_sees_no_key_gets_zeros_and_passes_no_gradient() -> None:
    query, key, value = _inputs(2, 9, 3, 70, 230, 64)
    out = flash_attention(query, key, value, _padded_prefill_mask(2, 70, 230))
    out[0, :3].float().sum().backward()  # only the three blind queries of row 0
    assert torch.equal(out[0, :3], torch.zeros_like(out[0, :3]))
    assert not out.isnan().any()
    for tensor in (query, key, value):
        assert torch.equal(tensor.grad, torch.zeros_like(tensor.grad))


@needs_kernel
def test_the_same_bits_on_one_thread_and_on_two() -> None:
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            query, key, value = _inputs(2, 6, 2, 150, 150, 64)
            out = flash_attention(query, key, value, causal=True)
            out.float().square().sum().backward()
            results.append([out.detach(), query.grad, key.grad, value.grad])
    finally:
        torch.set_num_threads(threads)
    for one, two in zip(*results):
        assert torch.equal(one, two)


@needs_kernel
@pytest.mark.parametrize(("change", "message"), [
    ("float32", "bfloat16"),
    ("head dim 48", "multiple of 32"),
    ("mask shape", "mask must be bool"),
    ("more queries than keys", "more queries than keys"),
])
def test_inputs_the_kernel_cannot_take_are_refused_by_name(change: str, message: str) -> None:
    query, key, value = (t.detach() for t in _inputs(1, 4, 2, 40, 60, 64))
    mask = None
    if change == "float32":
        query, key, value = query.float(), key.float(), value.float()
    elif change == "head dim 48":
        query, key, value = query[..., :48], key[..., :48], value[..., :48]
    elif change == "mask shape":
        mask = torch.ones(1, 1, 40, 59, dtype=torch.bool)
    else:
        query = torch.cat([query, query], 2)
    with pytest.raises(RuntimeError, match=message):
        flash_attention(query, key, value, mask)


def _cpu_with(monkeypatch: pytest.MonkeyPatch, amx: bool) -> None:
    flags = {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"} | ({"amx_bf16"} if amx else set())
    monkeypatch.setattr(flash, "cpu_flags", lambda: frozenset(flags))


@needs_kernel
def test_many_token_bf16_calls_run_the_kernel_only_where_it_is_the_faster_one(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    query, key, value = (t.detach() for t in _inputs(2, 9, 3, 70, 230, 64))
    mask = _padded_prefill_mask(2, 70, 230)
    _cpu_with(monkeypatch, amx=False)
    assert handles_many_tokens(_module(3), query, key, value, mask, 0.0, {})
    out, _ = native_attention_forward(_module(3), query, key, value, mask, scaling=64 ** -0.5)
    assert torch.equal(out, flash_attention(query, key, value, mask))
    _cpu_with(monkeypatch, amx=True)  # PyTorch's kernel uses AMX there: sdpa, unchanged
    assert not handles_many_tokens(_module(3), query, key, value, mask, 0.0, {})
    out, _ = native_attention_forward(_module(3), query, key, value, mask, scaling=64 ** -0.5)
    expected, _ = sdpa_attention_forward(_module(3), query, key, value, mask, scaling=64 ** -0.5)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("call", ["float32", "one token", "additive mask", "dropout", "unmasked prefill behind a cache",
                                  "soft-capping"])
def test_calls_the_kernel_does_not_take_keep_sdpa(call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _cpu_with(monkeypatch, amx=False)
    query, key, value = (t.detach() for t in _inputs(1, 4, 2, 40, 40, 64))
    mask, dropout, kwargs = None, 0.0, {}
    if call == "float32":
        query, key, value = query.float(), key.float(), value.float()
    elif call == "one token":
        query = query[:, :, :1]
        mask = torch.ones(1, 1, 1, 40, dtype=torch.bool)
    elif call == "additive mask":
        mask = torch.zeros(1, 1, 40, 40, dtype=torch.bfloat16)
    elif call == "dropout":
        dropout = 0.1
    elif call == "unmasked prefill behind a cache":
        query = query[:, :, :10]
    else:
        kwargs = {"softcap": 30.0}
    assert not handles_many_tokens(_module(2), query, key, value, mask, dropout, kwargs)
