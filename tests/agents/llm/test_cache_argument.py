"""cache_argument / returned_cache: the installed transformers' own name for the KV cache, in a model call and
in ``generate``, with no deprecation warning."""

from __future__ import annotations

import warnings

import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

from worldgym.agents.llm.cache_argument import cache_argument, returned_cache
from worldgym.agents.llm.models import tiny_model_config


def _model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config: Qwen3Config = tiny_model_config(32, pad_token_id=0, eos_token_id=1)
    return Qwen3ForCausalLM(config).eval()


def test_a_model_call_takes_and_returns_the_cache_silently():
    model, ids = _model(), torch.tensor([[5, 6, 7, 8, 9]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old name warns on every call from transformers 5.24 on
        with torch.no_grad():
            prefix = returned_cache(model(ids[:, :3], use_cache=True))
            rest = model(ids[:, 3:], use_cache=True, **cache_argument(prefix))
            whole = model(ids).logits
    assert isinstance(prefix, DynamicCache)
    assert returned_cache(rest) is prefix and prefix.get_seq_length() == 5  # the same cache, grown in place
    assert torch.allclose(rest.logits, whole[:, 3:], atol=1e-5)


def test_generate_goes_on_behind_a_given_cache():
    model, ids = _model(), torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        plain = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
        prefix = returned_cache(model(ids[:, :3], use_cache=True))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cached = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0,
                                    return_dict_in_generate=True, **cache_argument(prefix))
    assert torch.equal(cached.sequences, plain)
    assert returned_cache(cached) is prefix and prefix.get_seq_length() == 4 + 4 - 1  # the last token unread
