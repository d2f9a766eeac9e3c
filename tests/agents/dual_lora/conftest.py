"""A CSR tokenizer with the world model's markers, and an engine that phones on every turn."""

import pytest
import torch

from worldgym.agents.dual_lora import WM_SPECIAL_TOKENS
from worldgym.agents.grpo import make_text_env
from worldgym.agents.llm.engines import Generation
from worldgym.agents.llm.tokenizer import env_text_corpus, train_chat_tokenizer

torch.set_num_threads(1)

PHONE_CALL = (
    '<tool_call>\n{"name": "make_phone_call", "arguments": {"phone_number": "1-800-555-0100"}}\n</tool_call>'
)
SEARCH = '<tool_call>\n{"name": "search_company", "arguments": {"company": "Acme"}}\n</tool_call>'


def make_csr_env():
    return make_text_env("CSRPhone-v1", {"difficulty": 1}, True)


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
