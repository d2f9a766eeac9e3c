"""The fast decode attention: the same greedy tokens and logits as sdpa, its fast path taken for decode steps
only, training untouched, PEFT and refusals."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from worldgym.agents.llm.cache_argument import cache_argument
from worldgym.agents.llm.engines import decode_attention
from worldgym.agents.llm.engines.decode_attention import (
    FAST_DECODE_ATTENTION,
    decode_attention_forward,
    use_fast_decode_attention,
)
from worldgym.agents.llm.engines.growing_cache import growing_cache
from worldgym.agents.llm.models import build_tiny_model, sharpen


@pytest.fixture()
def fast_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every fast-path decision ``decode_attention_forward`` makes, recorded."""
    decisions: list[bool] = []
    original = decode_attention.handles_decode

    def recording(*args: object) -> bool:
        decisions.append(original(*args))  # type: ignore[arg-type]
        return decisions[-1]

    monkeypatch.setattr(decode_attention, "handles_decode", recording)
    return decisions


def _batch(padded: bool) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, 300, (3, 14), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :5] = mask[1, :2] = 0
        ids[mask == 0] = 0
    return ids, mask


def _greedy(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    config = model.config if not hasattr(model, "get_base_model") else model.get_base_model().config
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, min_new_tokens=12, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                         **cache_argument(growing_cache(None, 13, config)))
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padded", [True, False])
def test_greedy_generate_matches_sdpa(tokenizer, fast_calls: list[bool], dtype: torch.dtype, padded: bool) -> None:
    model = sharpen(build_tiny_model(tokenizer, seed=0, dtype=dtype)).eval()
    ids, mask = _batch(padded)
    reference_tokens, reference_logits = _greedy(model, ids, mask)
    assert use_fast_decode_attention(model) and model.config._attn_implementation == FAST_DECODE_ATTENTION
    tokens, logits = _greedy(model, ids, mask)
    layers = model.config.num_hidden_layers
    assert fast_calls[:layers] == [False] * layers  # the prefill goes to sdpa
    assert fast_calls[layers:] == [True] * (11 * layers)  # every decode step takes the fast path
    tolerance = 1e-4 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(logits.float(), reference_logits.float(), atol=tolerance, rtol=0)
    if dtype == torch.float32:
        assert torch.equal(tokens, reference_tokens)


@pytest.mark.parametrize("amx", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("masked", [True, False])
def test_one_step_equals_sdpa_on_strided_views(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, masked: bool,
                                               amx: bool) -> None:
    # each CPU kind's layout (enable_gqa for bf16 on AMX, folded elsewhere) gives sdpa's result
    monkeypatch.setattr(decode_attention, "cpu_flags", lambda: frozenset({"avx512_bf16", *(["amx_bf16"] * amx)}))
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    query = torch.randn(4, 9, 1, 16, dtype=dtype)
    key, value = (torch.randn(4, 3, 50, 16, dtype=dtype)[:, :, :37] for _ in range(2))  # slices of a buffer
    mask = torch.ones(4, 1, 1, 37, dtype=torch.bool)
    mask[:2, ..., :5] = False
    mask = mask if masked else None
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    got, weights = decode_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert weights is None and got.shape == expected.shape == (4, 1, 9, 16) and got.is_contiguous()
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.float(), expected.float(), atol=tolerance, rtol=0)


def test_training_forward_and_backward_unaffected(tokenizer, fast_calls: list[bool]) -> None:
    ids, mask = _batch(padded=True)
    grads = []
    for fast in (False, True):
        model = build_tiny_model(tokenizer, seed=0).train()
        if fast:
            assert use_fast_decode_attention(model)
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    assert fast_calls and not any(fast_calls)
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))


def test_one_token_query_with_gradients_falls_back(fast_calls: list[bool]) -> None:
    module = torch.nn.Module()
    module.num_key_value_groups = 2
    query = torch.randn(2, 4, 1, 8, requires_grad=True)
    key, value = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    decode_attention_forward(module, query, key, value, None)[0].sum().backward()
    assert fast_calls == [False] and query.grad is not None


def test_peft_model_is_switched(tokenizer, fast_calls: list[bool]) -> None:
    model = sharpen(build_tiny_model(tokenizer, seed=0))
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).eval()
    ids, mask = _batch(padded=True)
    reference, _ = _greedy(peft_model, ids, mask)
    assert use_fast_decode_attention(peft_model)
    tokens, _ = _greedy(peft_model, ids, mask)
    assert torch.equal(tokens, reference) and any(fast_calls)


def test_refuses_other_attention(tokenizer) -> None:
    eager = build_tiny_model(tokenizer, seed=0)
    eager.set_attn_implementation("eager")
    assert not use_fast_decode_attention(eager) and eager.config._attn_implementation == "eager"
    windowed = build_tiny_model(tokenizer, seed=0)
    windowed.config.layer_types = ["sliding_attention"] * windowed.config.num_hidden_layers
    assert not use_fast_decode_attention(windowed) and windowed.config._attn_implementation == "sdpa"


def test_layout_follows_the_cpu_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_attention, "cpu_flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    assert not decode_attention.folds_query_groups(torch.bfloat16)  # AMX: enable_gqa measured faster
    assert decode_attention.folds_query_groups(torch.float32)
    monkeypatch.setattr(decode_attention, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    assert decode_attention.folds_query_groups(torch.bfloat16)  # AVX512-BF16 without AMX: folded ~6x faster


@pytest.mark.parametrize("masked", [True, False])
def test_the_compiled_kernel_equals_float32_attention_on_strided_bf16_views(masked: bool) -> None:
    from worldgym.agents.llm.engines.decode_attention import compiled_decode_attention_forward

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(4, 9, 1, 16, generator=generator).bfloat16()
    key, value = (torch.randn(4, 3, 50, 16, generator=generator).bfloat16()[:, :, :37] for _ in range(2))
    mask = None
    if masked:
        mask = torch.ones(4, 1, 1, 37, dtype=torch.bool)
        mask[0, ..., :9] = False
    out, _ = compiled_decode_attention_forward(module, query, key, value, mask, scaling=0.25)
    reference, _ = sdpa_attention_forward(module, query.float(), key.float(), value.float(),
                                          None if mask is None else mask, scaling=0.25)
    assert out.dtype == torch.bfloat16 and out.shape == reference.shape == (4, 1, 9, 16)
    torch.testing.assert_close(out.float(), reference, atol=1e-2, rtol=0)  # bf16 output rounding only


def test_the_compiled_kernel_falls_back_to_the_flash_kernel_with_one_warning(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    def failing(*args: object) -> torch.Tensor:
        raise RuntimeError("no C++ compiler found\nmore lines")

    monkeypatch.setattr(decode_attention, "_compiled", {"kernel": failing})
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    query = torch.randn(2, 9, 1, 16, dtype=torch.bfloat16)
    key, value = (torch.randn(2, 3, 20, 16, dtype=torch.bfloat16) for _ in range(2))
    with pytest.warns(RuntimeWarning, match="could not be built .*no C\\+\\+ compiler found\\); decoding with"):
        out, _ = decode_attention.compiled_decode_attention_forward(module, query, key, value, None, scaling=0.25)
    expected, _ = decode_attention_forward(module, query, key, value, None, scaling=0.25)
    assert torch.equal(out, expected)
    assert decode_attention._compiled["kernel"] is None
    again, _ = decode_attention.compiled_decode_attention_forward(module, query, key, value, None, scaling=0.25)
    assert torch.equal(again, expected)  # no second warning: pytest's -W error would fail on one


@pytest.mark.parametrize("kernel", ["compiled", "native", "native-decode"])
def test_an_engine_with_another_kernel_generates_what_the_flash_kernel_does(tokenizer, kernel: str) -> None:
    from worldgym.agents.llm.engines import HFEngine, SamplingParams

    prompts = [tokenizer("What is 3 plus 4?")["input_ids"], tokenizer("Add 12 and 9.")["input_ids"]]
    params = SamplingParams(max_new_tokens=10, temperature=0.0, seed=0)
    outputs = {}
    names = {"flash": FAST_DECODE_ATTENTION, "compiled": decode_attention.COMPILED_DECODE_ATTENTION,
             "native": decode_attention.NATIVE_ATTENTION, "native-decode": decode_attention.NATIVE_DECODE_ATTENTION}
    for name in ("flash", kernel):
        model = sharpen(build_tiny_model(tokenizer, seed=0, dtype=torch.bfloat16), 3.0)
        engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], dtype=torch.bfloat16,
                          decode_attention=name)
        assert model.config._attn_implementation == names[name]
        outputs[name] = [g[0] for g in engine.generate(prompts, params)]
    for flash, other in zip(outputs["flash"], outputs[kernel]):
        assert flash.token_ids[:3] == other.token_ids[:3]  # later tokens may part on a bf16 near-tie
        assert abs(flash.logprobs[0] - other.logprobs[0]) < 0.05


def test_an_unknown_kernel_is_refused(tokenizer) -> None:
    from worldgym.agents.llm.engines import HFEngine

    model = build_tiny_model(tokenizer, seed=0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="decode_attention must be one of .*got 'fast'"):
        HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], decode_attention="fast")
    with pytest.raises(ValueError, match="kernel must be one of"):
        use_fast_decode_attention(model, kernel="fast")


def test_a_second_engine_on_the_same_model_keeps_its_kernel(tokenizer) -> None:
    from worldgym.agents.llm.engines import HFEngine
    from worldgym.agents.llm.engines.decode_attention import decode_kernel_of

    model = build_tiny_model(tokenizer, seed=0, dtype=torch.bfloat16)
    assert decode_kernel_of(model) is None  # plain sdpa
    HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], dtype=torch.bfloat16,
             decode_attention="compiled")
    HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], dtype=torch.bfloat16)  # e.g. a reply engine
    assert decode_kernel_of(model) == "compiled"
    HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], dtype=torch.bfloat16, decode_attention="flash")
    assert decode_kernel_of(model) == "flash"
