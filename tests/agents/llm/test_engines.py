"""HFEngine: left-padded batches, determinism, stop tokens, logprobs equal to a training forward."""

import importlib.util

import pytest
import torch

from worldgym.agents.llm.engines import Generation, GenerationEngine, HFEngine, SamplingParams
from worldgym.agents.llm.engines.hf import group_shared_prefixes
from worldgym.agents.llm.losses import token_logprobs


def _engine(model, tokenizer, batch_size=4):
    return HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=batch_size)


def assert_logprobs_match_a_plain_forward(model, prompts, results, temperature):
    """Every generation's logprobs equal a training-style forward over prompt + generation."""
    for prompt, generations in zip(prompts, results, strict=True):
        for generation in generations:
            ids = torch.tensor([prompt + generation.token_ids])
            with torch.no_grad():
                expected = token_logprobs(model(ids).logits[:, :-1], ids[:, 1:], temperature=temperature)
            assert torch.allclose(
                torch.tensor(generation.logprobs), expected[0, len(prompt) - 1 :], atol=1e-4
            )


def test_logprobs_match_a_plain_forward_despite_left_padding(model, tokenizer):
    engine = _engine(model, tokenizer)
    assert isinstance(engine, GenerationEngine)
    prompts = [
        tokenizer("Tom")["input_ids"],
        tokenizer("There are 4 boxes with 3 pens in each box.")["input_ids"],
    ]
    results = engine.generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=12, n=3, seed=5))
    assert [len(r) for r in results] == [3, 3]
    assert_logprobs_match_a_plain_forward(model, prompts, results, temperature=0.7)


def test_shared_prefix_prefill_gives_the_same_samples_and_logprobs(model, tokenizer):
    question = tokenizer("There are 4 boxes with 3 pens in each box. How many pens?")["input_ids"]
    other = tokenizer("Ana has 5 cards.")["input_ids"]
    # a group of n samples, two replies continuing one question (a later turn), and an unrelated prompt
    prompts = [question, question + tokenizer(" 12 pens")["input_ids"], question + [5], other]
    params = SamplingParams(temperature=0.9, max_new_tokens=8, n=3, seed=11)
    plain = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], min_shared_prefix=0)
    shared = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], min_shared_prefix=4)
    groups = group_shared_prefixes([p for p in prompts for _ in range(3)], 4)
    assert groups.prefix_lengths == [len(question) - 1, len(other) - 1]  # the sharing path really runs
    expected, got = plain.generate(prompts, params), shared.generate(prompts, params)
    assert [[g.token_ids for g in r] for r in got] == [[g.token_ids for g in r] for r in expected]
    assert_logprobs_match_a_plain_forward(model, prompts, got, temperature=0.9)


def test_seeded_sampling_is_reproducible_and_batch_size_free(model, tokenizer):
    prompts = [tokenizer("Ana has")["input_ids"]] * 3
    params = SamplingParams(max_new_tokens=10, n=2, seed=3)
    first = _engine(model, tokenizer).generate(prompts, params)
    again = _engine(model, tokenizer).generate(prompts, params)
    assert [[g.token_ids for g in r] for r in first] == [[g.token_ids for g in r] for r in again]
    other = _engine(model, tokenizer).generate(prompts, SamplingParams(max_new_tokens=10, n=2, seed=4))
    assert [[g.token_ids for g in r] for r in first] != [[g.token_ids for g in r] for r in other]


def test_stop_token_ends_generation(model, tokenizer):
    prompt = tokenizer("Tom")["input_ids"]
    greedy = _engine(model, tokenizer).generate([prompt], SamplingParams(temperature=0, max_new_tokens=3))[0][
        0
    ]
    forced_stop = greedy.token_ids[1]
    engine = HFEngine(model, tokenizer.pad_token_id, [forced_stop])
    cut = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=3))[0][0]
    assert cut.token_ids == greedy.token_ids[: greedy.token_ids.index(forced_stop) + 1]
    assert cut.finish_reason == "stop" and greedy.finish_reason in ("stop", "length")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"n": 0}, "n must"),
    ],
)
def test_sampling_params_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_generation_checks_lengths():
    with pytest.raises(ValueError, match="2 token ids but 1 logprobs"):
        Generation([1, 2], [0.0], "stop")


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed (optional gpu extra)"
)
def test_vllm_engine_serves_the_current_lora_with_the_trainers_logprobs(tmp_path, model, tokenizer):
    from peft import LoraConfig, get_peft_model

    from worldgym.agents.llm.engines import VLLMEngine
    from worldgym.agents.llm.models import save_model_and_tokenizer

    save_model_and_tokenizer(model, tokenizer, tmp_path / "m")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # a random (non-zero) adapter, so serving the base instead would show
        lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
        policy = get_peft_model(model, lora).eval()
    engine = VLLMEngine(
        str(tmp_path / "m"),
        peft_model=policy,
        max_lora_rank=8,
        dtype="float32",
        max_model_len=256,
        enforce_eager=True,
        kv_cache_memory_bytes=64 * 2**20,
    )
    try:
        assert isinstance(engine, GenerationEngine)
        prompts = [tokenizer("Tom")["input_ids"], tokenizer("Ana has 5 cards.")["input_ids"]]
        params = SamplingParams(temperature=0.7, max_new_tokens=8, n=2, seed=1)
        out = engine.generate(prompts, params)
        assert [len(r) for r in out] == [2, 2] and [g.prompt_index for r in out for g in r] == [0, 0, 1, 1]
        assert_logprobs_match_a_plain_forward(policy, prompts, out, temperature=0.7)
        assert [[g.token_ids for g in r] for r in engine.generate(prompts, params)] == [
            [g.token_ids for g in r] for r in out
        ]
        with torch.no_grad():  # an update: only the adapter changes, and sync_weights serves it
            for name, parameter in policy.named_parameters():
                if "lora_B" in name:
                    parameter.mul_(-3.0)
        engine.sync_weights()
        assert_logprobs_match_a_plain_forward(policy, prompts, engine.generate(prompts, params), 0.7)
        with pytest.raises(ValueError, match="top_p"):
            engine.generate(prompts, SamplingParams(top_p=0.9))
    finally:
        engine.close()


def test_vllm_engine_without_vllm_names_the_install():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    from gymnasium.error import DependencyNotInstalled

    from worldgym.agents.llm.engines import VLLMEngine

    with pytest.raises(DependencyNotInstalled, match="worldgym\\[gpu\\]"):
        VLLMEngine("any")


def test_sharded_engine_keeps_prompt_order(model, tokenizer):
    from worldgym.agents.llm.engines import ShardedEngine

    prompts = [tokenizer(text)["input_ids"] for text in ("Tom", "Ana has", "Ben", "Mia gives", "Sam")]
    params = SamplingParams(temperature=0, max_new_tokens=4, n=2)
    sharded = ShardedEngine([_engine(model, tokenizer), _engine(model, tokenizer)]).generate(prompts, params)
    single = _engine(model, tokenizer).generate(prompts, params)
    assert [[g.token_ids for g in r] for r in sharded] == [[g.token_ids for g in r] for r in single]
    assert [r[0].prompt_index for r in sharded] == [0, 1, 2, 3, 4]
