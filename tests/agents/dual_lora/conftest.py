"""A CSR tokenizer with the world model's markers, and an engine that phones on every turn."""

import pytest
import torch

from worldgym.agents.dual_lora import WM_SPECIAL_TOKENS
from worldgym.agents.llm.engines import Generation
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.tokenizer import env_text_corpus, train_chat_tokenizer
from worldgym.spaces import ToolCall
from worldgym.wrappers import format_tool_call

torch.set_num_threads(1)

PHONE_CALL = format_tool_call(ToolCall("make_phone_call", {"phone_number": "1-800-555-0100"}))
SEARCH = format_tool_call(ToolCall("search_company", {"company": "Acme"}))


def make_csr_env():
    return make_text_env("CSRPhone-v1", {"difficulty": 1})


@pytest.fixture(scope="session")
def csr_tokenizer():
    corpus = env_text_corpus(make_csr_env, num_resets=50) + [PHONE_CALL, SEARCH] * 10
    return train_chat_tokenizer(corpus, vocab_size=800, extra_special_tokens=WM_SPECIAL_TOKENS)


class PhoningEngine:
    """Searches on the first turn and phones a number on every later one; logprob -1 per token."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls = 0

    def sync_weights(self):
        pass

    def generate(self, prompts, params, constraints=None):
        replies = []
        for prompt in prompts:
            text = SEARCH if self.tokenizer.decode(prompt).count("<tool_response>") == 0 else PHONE_CALL
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            replies.append([Generation(ids, [-1.0] * len(ids), "stop")])
        self.calls += 1
        return replies
