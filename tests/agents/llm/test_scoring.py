"""score_tokens equals the full-logits computation on the masked positions (plain and LoRA models)."""

import pytest
import torch
from peft import LoraConfig, get_peft_model

from worldgym.agents.llm.losses import token_logprobs
from worldgym.agents.llm.scoring import score_tokens


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
