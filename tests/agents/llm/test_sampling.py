"""The engine's sampling processors: the draw follows softmax(scores), temperature and top-p apply as
``generate``'s own warpers do, and a sampled generation stays reproducible by its seed."""

import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.engines.sampling import DrawNextToken, sampling_processors

NO_IDS = torch.empty(0, dtype=torch.long)


def test_the_draw_is_the_only_finite_score_and_follows_the_softmax() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.0, float("-inf"), -1.0])
    scores = DrawNextToken()(NO_IDS, logits.expand(40_000, -1).clone())
    assert ((scores == 0).sum(-1) == 1).all() and torch.isinf(scores).sum() == 40_000 * 4
    frequencies = torch.bincount(scores.argmax(-1), minlength=5).double() / 40_000
    assert torch.allclose(frequencies, logits.double().softmax(-1), atol=0.01)
    assert frequencies[3] == 0


def test_processors_are_generates_warpers_then_the_draw() -> None:
    assert sampling_processors(SamplingParams(temperature=0)) == []
    plain = sampling_processors(SamplingParams(temperature=0.5))
    assert [type(p) for p in plain] == [TemperatureLogitsWarper, DrawNextToken]
    nucleus = sampling_processors(SamplingParams(temperature=0.5, top_p=0.9))
    assert [type(p) for p in nucleus] == [TemperatureLogitsWarper, TopPLogitsWarper, DrawNextToken]
    assert nucleus[0].temperature == 0.5 and nucleus[1].top_p == 0.9


def test_top_p_keeps_draws_inside_the_nucleus() -> None:
    torch.manual_seed(1)
    logits = torch.tensor([3.0, 2.5, 0.0, -1.0, -2.0]).expand(20_000, -1).clone()
    scores = logits
    for processor in sampling_processors(SamplingParams(temperature=1.0, top_p=0.8)):
        scores = processor(NO_IDS, scores)
    assert set(scores.argmax(-1).unique().tolist()) == {0, 1}  # softmax: 0.59 + 0.36 pass 0.8 at token 1


def test_sampled_generations_repeat_with_their_seed_and_vary_across_seeds(model, tokenizer) -> None:
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    prompts = [tokenizer("Ana has")["input_ids"]]

    def tokens(seed: int) -> list[list[int]]:
        return [g.token_ids for g in engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=12,
                                                                             n=4, seed=seed))[0]]

    assert tokens(3) == tokens(3)
    assert tokens(3) != tokens(4)
