"""HFEngine: left-padded batches, determinism, stop tokens, logprobs equal to a training forward, rows that
stopped leaving the batch (``retiring_rows.py``) without changing any completion."""

import importlib.util

import pytest
import torch

from worldgym.agents.llm.engines import Generation, GenerationEngine, HFEngine, SamplingParams
from worldgym.agents.llm.engines.hf import group_shared_prefixes
from worldgym.agents.llm.engines.retiring_rows import DecodedRows, RetireFinishedRows
from worldgym.agents.llm.losses import token_logprobs
from worldgym.agents.llm.models import build_tiny_model, sharpen


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
    from worldgym.agents.llm.adapters import seeded_lora
    from worldgym.agents.llm.engines import VLLMEngine
    from worldgym.agents.llm.models import save_model_and_tokenizer

    save_model_and_tokenizer(model, tokenizer, tmp_path / "m")
    # a random (non-zero) adapter, so serving the base instead would show
    policy = seeded_lora(model, 0, rank=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                         init_lora_weights=False).eval()
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


STOP = 7


def test_a_call_ends_once_a_quarter_of_the_rows_but_not_all_have_stopped() -> None:
    criterion = RetireFinishedRows([STOP], prompt_width=2)
    prompts = torch.full((8, 2), STOP)  # stop tokens in the prompt do not count
    for stopped, ends in ((0, False), (1, False), (2, True), (7, True), (8, False)):
        generated = torch.zeros(8, 3, dtype=torch.long)
        generated[:stopped, 1] = STOP
        verdict = criterion(torch.cat([prompts, generated], 1), None)
        assert verdict.tolist() == [ends] * 8, stopped
    one_row = criterion(torch.tensor([[1, 1, STOP]]), None)
    assert one_row.tolist() == [False]  # a lone row's stop is generate's own business


def test_decoded_rows_follow_the_rows_still_in_the_batch() -> None:
    rows = DecodedRows(3)
    rows.add(torch.tensor([[1, STOP], [2, 2], [3, 3]]), -torch.arange(6.0).reshape(3, 2))
    assert rows.stopped([STOP]) == [0] and rows.steps == 2
    rows.keep([1, 2])
    rows.add(torch.tensor([[4], [STOP]]), torch.tensor([[-7.0], [-8.0]]))
    assert rows.tokens == [[1, STOP], [2, 2, 4], [3, 3, STOP]] and rows.stopped([STOP]) == [1]
    assert rows.logprobs == [[0.0, -1.0], [-2.0, -3.0, -7.0], [-4.0, -5.0, -8.0]]
    with pytest.raises(ValueError, match="logprobs"):
        rows.add(torch.tensor([[5], [6]]), torch.zeros(2, 1, 5))


def _many_stops_engine(model, tokenizer, batch_size: int) -> HFEngine:
    """Rows stop at one of many ids, so they end at different lengths."""
    stops = [tokenizer.eos_token_id, *range(5, len(tokenizer), 11)]
    return HFEngine(model, tokenizer.pad_token_id, stops, batch_size=batch_size)


def _prompts(tokenizer) -> list[list[int]]:
    texts = ["Tom", "There are 4 boxes with 3 pens in each box.", "Ana has 5 cards and buys 3 more.", "How many?"]
    return [tokenizer(text)["input_ids"] for text in texts]


def _batch_rows_per_call(model) -> list[int]:
    """Wraps ``model.generate`` to record each call's batch rows."""
    rows: list[int] = []
    generate = model.generate

    def recording(*args, **kwargs):
        rows.append(kwargs["input_ids"].shape[0])
        return generate(*args, **kwargs)

    model.generate = recording
    return rows


def test_greedy_batches_retire_rows_and_match_each_prompt_alone(tokenizer) -> None:
    model = sharpen(build_tiny_model(tokenizer, seed=0))
    prompts = _prompts(tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=32, n=2)
    alone = _many_stops_engine(model, tokenizer, batch_size=1).generate(prompts, params)
    rows = _batch_rows_per_call(model)
    batched = _many_stops_engine(model, tokenizer, batch_size=8).generate(prompts, params)
    assert rows[0] == 8 and len(rows) > 1 and rows == sorted(rows, reverse=True) and rows[-1] < 8  # rows left
    lengths = {len(g.token_ids) for r in batched for g in r}
    assert len(lengths) > 2 and {g.finish_reason for r in batched for g in r} == {"stop", "length"}
    for got_row, expected_row in zip(batched, alone, strict=True):
        for got, expected in zip(got_row, expected_row, strict=True):
            assert got.token_ids == expected.token_ids and got.finish_reason == expected.finish_reason
            assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(expected.logprobs), atol=1e-4)


def test_sampled_batches_that_retire_rows_keep_the_trainers_logprobs(tokenizer) -> None:
    model = sharpen(build_tiny_model(tokenizer, seed=1))
    prompts = _prompts(tokenizer)
    rows = _batch_rows_per_call(model)
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=24, n=3, seed=5)
    results = _many_stops_engine(model, tokenizer, batch_size=12).generate(prompts, params)
    assert len(rows) > 1 and rows[-1] < 12
    assert_logprobs_match_a_plain_forward(model, prompts, results, temperature=0.8)
    again = _many_stops_engine(model, tokenizer, batch_size=12).generate(prompts, params)  # still reproducible
    assert [[g.token_ids for g in r] for r in again] == [[g.token_ids for g in r] for r in results]


def test_a_calls_logprobs_step_by_step_are_the_bits_of_the_whole_calls() -> None:
    from worldgym.agents.llm.engines.hf import _call_logprobs, _sampled_logprobs

    generator = torch.Generator().manual_seed(0)
    logits = [torch.randn(3, 50, generator=generator) * 4 for _ in range(6)]  # 6 steps of 3 rows
    tokens = torch.randint(0, 50, (3, 6), generator=generator)
    processor = type("Recorded", (), {})()  # what the engine reads off a CopyArgumentsProcessor
    processor.allowed = [[None] * 9, [None] * 9, [None] * 9]
    processor.allowed[2][3 + 1] = [3, 7, 9]  # prompt row 2 is batch row 1; this call's steps start at 3
    tokens[1, 1] = 7
    got = _call_logprobs(logits, tokens, 0.7, processor, rows=[0, 2, 1], first_step=3)
    allowed = [processor.allowed[row][3:9] for row in (0, 2, 1)]
    whole = _sampled_logprobs(torch.stack(logits, dim=1) / 0.7, tokens, allowed)
    assert torch.equal(got, whole)
    masked = logits[1][1, [3, 7, 9]] / 0.7
    assert torch.allclose(got[1, 1], masked.log_softmax(-1)[1])  # over the allowed tokens only
