"""Tokenizer training, chat template (tools, assistant masks), tiny model build and save/load round trips."""

import pytest
import torch

from worldgym.agents.llm.models import build_tiny_model, load_model, load_tokenizer, save_model_and_tokenizer
from worldgym.agents.llm.tokenizer import TOOL_SPECIAL_TOKENS, train_chat_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 3 + 4?"},
    {"role": "assistant", "content": '<tool_call>{"name": "add", "arguments": {}}</tool_call>'},
    {"role": "tool", "content": "7"},
    {"role": "assistant", "content": "#### 7"},
]


def test_byte_level_round_trip_and_special_tokens(tokenizer):
    text = "Zoë paid $1,234.50 — ünïcode ✓ and tabs\t!"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    for token in TOOL_SPECIAL_TOKENS:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    assert tokenizer.padding_side == "left" and tokenizer.eos_token == "<|im_end|>"


def test_chat_template_tools_and_generation_mask(tokenizer):
    text = tokenizer.apply_chat_template(CHAT, tools=TOOLS, tokenize=False)
    assert '"name": "add"' in text and "<tool_response>\n7\n</tool_response>" in text
    encoded = tokenizer.apply_chat_template(
        CHAT, tools=TOOLS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assistant = [t for t, m in zip(encoded["input_ids"], encoded["assistant_masks"]) if m]
    assert tokenizer.decode(assistant) == (
        '<tool_call>{"name": "add", "arguments": {}}</tool_call><|im_end|>#### 7<|im_end|>'
    )
    prompt = tokenizer.apply_chat_template(CHAT[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n") and "# Tools" not in prompt


def test_tokenizer_rejects_tiny_vocab():
    with pytest.raises(ValueError, match="vocab_size must exceed"):
        train_chat_tokenizer(["abc"], vocab_size=100)


def test_tiny_model_is_seeded_and_leaves_global_rng(tokenizer):
    state = torch.random.get_rng_state()
    first, second = build_tiny_model(tokenizer, seed=1), build_tiny_model(tokenizer, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
    assert not torch.equal(next(build_tiny_model(tokenizer, seed=2).parameters()), next(first.parameters()))
    assert 2e5 < sum(p.numel() for p in first.parameters()) < 5e6
    with pytest.raises(ValueError, match="size must be one of"):
        build_tiny_model(tokenizer, size="huge")


def test_save_load_round_trip(tmp_path, tokenizer, model):
    save_model_and_tokenizer(model, tokenizer, tmp_path / "tiny")
    loaded, loaded_tokenizer = load_model(tmp_path / "tiny"), load_tokenizer(tmp_path / "tiny")
    ids = torch.tensor([tokenizer("Tom has 3 apples.")["input_ids"]])
    assert torch.allclose(model(ids).logits, loaded(ids).logits)
    assert loaded_tokenizer.apply_chat_template(
        CHAT, tools=TOOLS, tokenize=False
    ) == tokenizer.apply_chat_template(CHAT, tools=TOOLS, tokenize=False)
    assert loaded_tokenizer.padding_side == "left"


def test_signature_tool_format_lists_each_tool_on_one_line():
    tokenizer = train_chat_tokenizer(["hello world"] * 4, vocab_size=400, tool_format="signatures")
    tools = TOOLS + [
        {
            "type": "function",
            "function": {
                "name": "call",
                "description": "Call a number.",
                "parameters": {"type": "object", "properties": {"phone_number": {}, "auth_info": {}}},
            },
        }
    ]
    text = tokenizer.apply_chat_template(CHAT, tools=tools, tokenize=False)
    assert "<tools>\nadd()\ncall(phone_number, auth_info)\n</tools>" in text
    assert "Add two numbers." not in text and "<tool_response>\n7\n</tool_response>" in text
    encoded = tokenizer.apply_chat_template(
        CHAT, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assistant = [t for t, m in zip(encoded["input_ids"], encoded["assistant_masks"]) if m]
    assert tokenizer.decode(assistant).endswith("#### 7<|im_end|>")


def test_split_digits_gives_one_token_per_digit_and_round_trips(tmp_path):
    corpus = ["call 1-833-977-5002 or 1-833-977-5002 now"] * 20
    merged = train_chat_tokenizer(corpus, vocab_size=400)
    split = train_chat_tokenizer(corpus, vocab_size=400, split_digits=True)
    text = "dial 1-833-977-5002"
    assert len(merged.tokenize("5002")) < 4
    assert split.tokenize("5002") == ["5", "0", "0", "2"]
    split.save_pretrained(tmp_path)
    reloaded = load_tokenizer(tmp_path)
    assert reloaded.decode(reloaded(text)["input_ids"]) == text
    assert reloaded.tokenize("5002") == ["5", "0", "0", "2"]


def test_tokenizer_rejects_unknown_tool_format():
    with pytest.raises(ValueError, match="tool_format"):
        train_chat_tokenizer(["abc"] * 4, vocab_size=400, tool_format="yaml")
