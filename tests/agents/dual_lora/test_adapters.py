"""PEFT's multi-adapter traps, each pinned: frozen inactive adapters, frozen new adapters, one backward for two
adapters, and the policy adapter saved flat."""

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from worldgym.agents.dual_lora import DualLoRAConfig, attach_adapters
from worldgym.agents.llm.adapters import activate_adapters, save_adapter_flat, using_adapters
from worldgym.agents.llm.models import build_tiny_model


def _lora_names(model, adapter):
    return {n for n, p in model.named_parameters() if "lora_" in n and f".{adapter}." in n}


def _trainable(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def _plain_two_adapters(tokenizer):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(build_tiny_model(tokenizer, seed=0), lora, adapter_name="policy")
    model.add_adapter("world_model", lora)
    return model


def test_peft_add_adapter_leaves_the_new_adapter_frozen_and_attach_adapters_does_not(csr_tokenizer):
    plain = _plain_two_adapters(csr_tokenizer)
    assert not _trainable(plain) & _lora_names(plain, "world_model")  # the PEFT trap
    model = attach_adapters(build_tiny_model(csr_tokenizer, seed=0), DualLoRAConfig())
    both = _lora_names(model, "policy") | _lora_names(model, "world_model")
    assert _trainable(model) == both and _lora_names(model, "world_model")


def test_peft_set_adapter_freezes_the_inactive_adapter_and_activate_adapters_keeps_it(csr_tokenizer):
    model = _plain_two_adapters(csr_tokenizer)
    model.set_adapter("world_model")
    assert not _trainable(model) & _lora_names(model, "policy")  # the PEFT trap
    activate_adapters(model, ["world_model"], trainable=["policy", "world_model"])
    assert _lora_names(model, "policy") <= _trainable(model)
    with using_adapters(model, ["policy"], trainable=["policy", "world_model"]):
        assert model.active_adapters == ["policy"]
    assert model.active_adapters == ["world_model"]
    with pytest.raises(ValueError, match="unknown adapters"):
        activate_adapters(model, ["nope"])


@pytest.mark.parametrize("transfer", ["separate", "stacked", "shared"])
def test_one_backward_reaches_every_lora_tensor_and_no_base_weight(csr_tokenizer, transfer):
    config = DualLoRAConfig(transfer=transfer)
    model = attach_adapters(build_tiny_model(csr_tokenizer, seed=0), config)
    with torch.no_grad():  # LoRA starts with B = 0, where A's gradient is 0 by construction
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)
    ids = torch.randint(0, len(csr_tokenizer), (2, 12))
    policy_loss = model(input_ids=ids, labels=ids).loss
    with using_adapters(model, [config.world_model_adapter], config.adapter_names):
        wm_loss = model(input_ids=ids, labels=ids).loss
    (policy_loss + 0.5 * wm_loss).backward()
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        else:
            assert parameter.grad is None, name
    adapters = {name.split(".")[-2] for name, _ in model.named_parameters() if "lora_" in name}
    assert adapters == set(config.adapter_names)


def test_policy_adapter_saved_flat_reloads_to_the_same_logits(csr_tokenizer, tmp_path):
    model = attach_adapters(build_tiny_model(csr_tokenizer, seed=0), DualLoRAConfig())
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)
    model.eval()
    ids = torch.randint(0, len(csr_tokenizer), (2, 10))
    expected = model(input_ids=ids).logits
    path = save_adapter_flat(model, "policy", tmp_path / "policy")
    assert sorted(p.name for p in path.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    reloaded = PeftModel.from_pretrained(build_tiny_model(csr_tokenizer, seed=0), path).eval()
    torch.testing.assert_close(reloaded(input_ids=ids).logits, expected)
    with using_adapters(model, ["world_model"]):  # the other adapter computes something else
        assert not torch.allclose(model(input_ids=ids).logits, expected)


def _world_model_grads(model, loss_fn):
    """Gradients of a loss computed under the world model's adapter and backpropagated after the policy's is
    active again (as the trainer's one backward does)."""
    model.zero_grad()
    with using_adapters(model, ["world_model"], ["policy", "world_model"]):
        loss = loss_fn()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("recompute", ["chunk checkpoints", "activation checkpointing"])
def test_a_recomputed_forward_runs_under_the_adapters_of_the_first_forward(csr_tokenizer, recompute):
    """The backward recomputes checkpointed blocks after the trainer switched back to the policy's adapter: the
    recomputation must still use the world model's, so the gradient reaches it, and the same as without
    checkpointing."""
    from worldgym.agents.dual_lora.world_model import PhoneCallExample, score_in_chunks
    from worldgym.agents.llm.adapters import enable_activation_checkpointing

    config = DualLoRAConfig(transfer="separate", lora_dropout=0.0)  # train and eval mode compute the same
    model = attach_adapters(build_tiny_model(csr_tokenizer, seed=0), config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)
    examples = [PhoneCallExample(tuple(range(5, 5 + n)), 2, "a") for n in (9, 12, 6)]
    pad = csr_tokenizer.pad_token_id
    model.eval()  # no transformers checkpointing: the reference
    reference = _world_model_grads(model, lambda: score_in_chunks(model, examples, pad, 8).loss.sum())
    if recompute == "chunk checkpoints":
        grads = _world_model_grads(model, lambda: score_in_chunks(model, examples, pad, 1).loss.sum())
    else:
        enable_activation_checkpointing(model)
        model.train()  # transformers checkpoints layers in training mode only
        grads = _world_model_grads(model, lambda: score_in_chunks(model, examples, pad, 8).loss.sum())
    assert reference and set(grads) == set(reference)
    assert all(".world_model." in name for name in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, reference[name], atol=1e-5, rtol=1e-4)
