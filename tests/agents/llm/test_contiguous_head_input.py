"""The engine hands the LM head a contiguous input: ``generate`` slices a prefill's last position out of the
hidden states, and ``F.linear`` on that strided view of frozen weights takes a path that copies the head's weight
once per row."""

from __future__ import annotations

import torch

from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.engines.hf import contiguous_head_input
from worldgym.agents.llm.models import build_tiny_model


def _record_head_inputs(model: torch.nn.Module) -> list[bool]:
    """Whether each input the LM head's own linear layer saw was contiguous (appended per call)."""
    seen: list[bool] = []
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: seen.append(args[0].is_contiguous()))
    return seen


def test_a_strided_head_input_is_made_contiguous_only_within_the_block(tokenizer) -> None:
    model = build_tiny_model(tokenizer, seed=0).requires_grad_(False)
    seen = _record_head_inputs(model)
    hidden = torch.randn(3, 5, model.config.hidden_size)[:, -1:, :]
    assert not hidden.is_contiguous()
    with contiguous_head_input(model):
        inside = model.get_output_embeddings()(hidden)
    outside = model.get_output_embeddings()(hidden)
    assert seen == [True, False]
    torch.testing.assert_close(inside, outside)  # the same logits, up to the two products' rounding


def test_an_engine_prefills_with_a_contiguous_head_input_and_removes_its_hook(tokenizer) -> None:
    model = build_tiny_model(tokenizer, seed=0).requires_grad_(False)
    seen = _record_head_inputs(model)
    head = model.get_output_embeddings()
    hooks_before = len(head._forward_pre_hooks)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    prompts = [tokenizer("What is 3 plus 4?")["input_ids"], tokenizer("Add 12 and 9.")["input_ids"]]
    engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=0.0, seed=0))
    assert seen and all(seen)  # the prefill's last position too
    assert len(head._forward_pre_hooks) == hooks_before
