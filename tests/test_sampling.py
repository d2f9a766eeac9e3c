"""sample_index: inverse transform sampling draws each class at its probability, never one of weight 0, and
stays inside the positive classes when the draw rounds up to the total."""

import pytest
import torch

from worldgym.sampling import sample_index


def test_draws_follow_the_weights_unnormalised_or_not() -> None:
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for scale in (0.1, 1.0, 7.0):
        drawn = sample_index((weights * scale).expand(100_000, -1), torch.Generator().manual_seed(0))
        frequencies = torch.bincount(drawn, minlength=4).double() / len(drawn)
        assert torch.allclose(frequencies, weights.double() / 10, atol=0.01)


def test_classes_of_weight_zero_are_never_drawn() -> None:
    probs = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0], dtype=torch.float64).expand(50_000, -1)
    drawn = sample_index(probs, torch.Generator().manual_seed(1))
    assert set(drawn.unique().tolist()) == {1, 3}


def test_a_draw_that_rounds_up_to_the_total_gives_the_last_positive_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "rand", lambda shape, **kwargs: torch.ones(shape, dtype=kwargs["dtype"]))
    probs = torch.tensor([[0.2, 0.8, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    assert sample_index(probs).tolist() == [1, 3]


def test_batch_shape_and_seeds() -> None:
    probs = torch.rand(2, 3, 7).softmax(-1)
    first = sample_index(probs, torch.Generator().manual_seed(5))
    assert first.shape == (2, 3)
    assert torch.equal(first, sample_index(probs, torch.Generator().manual_seed(5)))
