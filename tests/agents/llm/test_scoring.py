"""score_tokens equals the full-logits computation on the masked positions (plain and LoRA models)."""

import pytest
import torch
from peft import LoraConfig, get_peft_model

from worldgym.agents.llm.adapters import enable_activation_checkpointing
from worldgym.agents.llm.losses import token_logprobs
from worldgym.agents.llm.scoring import score_tokens, shared_prefix


@pytest.mark.parametrize("lora", [False, True])
def test_masked_scoring_matches_full_forward(model, tokenizer, lora):
    if lora:
        model = get_peft_model(
            model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        )
    rows = [
        tokenizer("Tom has 3 pens and 4 cards. Ana has 5.")["input_ids"],
        tokenizer("Ana")["input_ids"] * 9,
    ]
    ids = torch.tensor([row[:9] for row in rows])
    attention = torch.ones_like(ids)
    attention[1, 6:] = 0  # right padding
    mask = torch.zeros(2, 8)
    mask[0, 3:] = 1
    mask[1, 2:5] = 1
    scored = score_tokens(model, ids, attention, mask, temperature=0.8)
    full = token_logprobs(model(input_ids=ids, attention_mask=attention).logits[:, :-1], ids[:, 1:], 0.8)
    assert torch.allclose(scored.logprobs, full * mask, atol=1e-5)
    assert scored.logits.shape == (int(mask.sum()), len(tokenizer))
    scored.logprobs.sum().backward()
    assert any(p.grad is not None for p in model.parameters() if p.requires_grad)


PROMPTS = ("Tom has 3 pens and 4 cards.", "Ana has 5 pens.")


def _grpo_like_batch(tokenizer, generator):
    """Two groups of three right-padded rows: each group shares a prompt, replies differ in length."""
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS]
    rows, masks = [], []
    for prompt in prompts:
        for reply_length in (2, 5, 3):
            reply = torch.randint(4, len(tokenizer), (reply_length,), generator=generator).tolist()
            rows.append(prompt + reply)
            masks.append([0] * (len(prompt) - 1) + [1] * reply_length)
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros(len(rows), width - 1)
    for r, (row, row_mask) in enumerate(zip(rows, masks)):
        ids[r, : len(row)], attention[r, : len(row)] = torch.tensor(row), 1
        mask[r, : len(row_mask)] = torch.tensor(row_mask, dtype=torch.float32)
    return ids, attention, mask, torch.tensor([7, 7, 7, 2, 2, 2])


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prefix_scoring_matches_per_row_scoring(model, tokenizer, lora):
    if lora:
        model = get_peft_model(
            model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        )
    ids, attention, mask, groups = _grpo_like_batch(tokenizer, torch.Generator().manual_seed(0))
    split = shared_prefix(ids, attention, mask, groups)
    prompt_lengths = [len(tokenizer(text)["input_ids"]) for text in PROMPTS]
    assert split.saved_tokens == sum(2 * (length - 1) for length in prompt_lengths)  # 2 extra rows per group
    assert split.padded_tokens < ids.numel()  # so score_tokens takes the shared path
    trainable = [p for p in model.parameters() if p.requires_grad]

    def scored_and_grads(group_ids):
        model.zero_grad()
        scored = score_tokens(model, ids, attention, mask, 0.9, group_ids=group_ids)
        (scored.logprobs.sum() + scored.logits.logsumexp(-1).sum()).backward()
        return scored, [p.grad.clone() for p in trainable]

    plain, plain_grads = scored_and_grads(None)
    shared, shared_grads = scored_and_grads(groups)
    assert torch.allclose(shared.logprobs, plain.logprobs, atol=1e-5)
    assert torch.allclose(shared.logits, plain.logits, atol=1e-4)
    for a, b in zip(shared_grads, plain_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_shared_prefix_stops_at_the_first_difference_and_the_first_trained_token():
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 9, 4, 5], [1, 2, 3, 4, 5]])
    attention = torch.ones_like(ids)
    mask = torch.tensor([[0, 0, 0, 1.0], [0, 0, 0, 1], [0, 1, 1, 1]])
    split = shared_prefix(ids, attention, mask, torch.tensor([0, 0, 1]))
    # group 0: tokens differ at position 2; group 1: row 2 trains token 2 (predicted from position 1)
    assert split.prefix_length.tolist() == [2, 1]
    assert split.saved_tokens == 2


def test_activation_checkpointing_falls_back_to_the_plain_pass(model, tokenizer):
    """transformers drops the KV cache of checkpointed layers in training mode: the shared pass can't run."""
    ids, attention, mask, groups = _grpo_like_batch(tokenizer, torch.Generator().manual_seed(1))
    expected = score_tokens(model, ids, attention, mask, group_ids=groups).logprobs.detach()
    enable_activation_checkpointing(model)
    model.train()
    scored = score_tokens(model, ids, attention, mask, group_ids=groups)
    assert torch.allclose(scored.logprobs, expected, atol=1e-5)
    scored.logprobs.sum().backward()
