"""Generation with merged LoRA layers: PEFT's outputs up to rounding, the base weights untouched, merged weights
computed again after an update or an adapter switch, layers PEFT computes otherwise left alone, and an engine
that generates what it generates without merging."""

from __future__ import annotations

import torch
from peft import PeftModel

from worldgym.agents.llm.adapters import activate_adapters, seeded_lora
from worldgym.agents.llm.engines.merged_lora import MergedLoRA, mergeable
from worldgym.agents.llm.models import model_from_config, sharpen, tiny_model_config

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _lora_model(adapters: tuple[str, ...] = ("default",), dtype: torch.dtype = torch.float32, **options: object
                ) -> PeftModel:
    base = model_from_config(tiny_model_config(64, pad_token_id=0)).to(dtype)
    model = seeded_lora(base, 0, rank=4, alpha=8, target_modules=TARGETS, adapter_names=adapters,
                        init_lora_weights=False, **options)  # random A and B: the adapters change the outputs
    return model.eval()


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.randint(1, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_merged_layers_compute_what_peft_computes_and_leave_the_base_weights_alone() -> None:
    model = _lora_model()
    base_weights = {name: p.clone() for name, p in model.named_parameters() if "lora_" not in name}
    expected = _logits(model)
    merged = MergedLoRA(model, torch.float32)
    with merged.applied() as count:
        inside = _logits(model)
    assert count == len(TARGETS) * model.config.num_hidden_layers
    torch.testing.assert_close(inside, expected, atol=1e-4, rtol=1e-4)
    with model.disable_adapter():
        plain = _logits(model)
    assert (plain - expected).abs().max() > 1e-2  # the adapters matter, so the merge was tested
    assert all(torch.equal(p, base_weights[name]) for name, p in model.named_parameters() if name in base_weights)
    assert not any("forward" in vars(layer) for layer in model.modules())  # PEFT's forwards are back
    torch.testing.assert_close(_logits(model), expected, atol=0, rtol=0)


def test_an_update_or_another_adapter_merges_again() -> None:
    model = _lora_model(adapters=("policy", "world"))
    merged = MergedLoRA(model, torch.float32)
    with merged.applied():
        _logits(model)
    first = dict(merged._weights)
    with merged.applied():
        _logits(model)
    assert all(merged._weights[layer][1] is weight for layer, (_, weight) in first.items())  # kept, not recomputed
    with torch.no_grad():  # an optimizer step: in place
        for name, parameter in model.named_parameters():
            if "lora_B.policy" in name:
                parameter.add_(0.05)
    expected = _logits(model)
    with merged.applied():
        torch.testing.assert_close(_logits(model), expected, atol=1e-4, rtol=1e-4)
    activate_adapters(model, ["world"])
    expected = _logits(model)
    with merged.applied():
        torch.testing.assert_close(_logits(model), expected, atol=1e-4, rtol=1e-4)


def test_layers_peft_computes_otherwise_are_not_merged() -> None:
    dora = _lora_model(use_dora=True)
    assert not any(mergeable(layer) for layer in dora.modules())
    expected = _logits(dora)
    with MergedLoRA(dora, torch.float32).applied() as count:
        assert count == 0
        assert torch.equal(_logits(dora), expected)
    plain = _lora_model()
    with plain.disable_adapter():
        assert not any(mergeable(layer) for layer in plain.modules())


def test_an_engine_merging_under_bf16_generates_what_it_does_unmerged(tokenizer) -> None:
    from worldgym.agents.llm.engines import HFEngine, SamplingParams
    from worldgym.agents.llm.models import build_tiny_model

    prompts = [tokenizer("What is 3 plus 4?")["input_ids"], tokenizer("Add 12 and 9.")["input_ids"]]
    params = SamplingParams(max_new_tokens=8, temperature=0.0, seed=0)
    outputs = {}
    for merge in (False, True):
        base = sharpen(build_tiny_model(tokenizer, seed=0, dtype=torch.bfloat16), 3.0)
        model = seeded_lora(base, 0, rank=4, alpha=8, target_modules=TARGETS, init_lora_weights=False)
        engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], dtype=torch.bfloat16,
                          merge_lora=merge)
        outputs[merge] = [g[0] for g in engine.generate(prompts, params)]
        assert (engine.merged_lora is not None) == merge
        if merge:  # every adapted layer was merged (and its weight kept for the next call)
            assert len(engine.merged_lora._weights) == len(TARGETS) * base.config.num_hidden_layers
    for unmerged, merged in zip(outputs[False], outputs[True]):
        assert unmerged.token_ids[:3] == merged.token_ids[:3]  # later tokens may part on a bf16 near-tie
        assert abs(unmerged.logprobs[0] - merged.logprobs[0]) < 0.05
