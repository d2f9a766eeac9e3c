"""λ, the world-model loss weight: constant, a step curriculum, or adapted to the world model's accuracy."""

from __future__ import annotations

from typing import Any

from worldgym.agents.dual_lora.config import DualLoRAConfig

__all__ = ["LambdaController"]


class LambdaController:
    """The λ of each training step, and the policy loss's weight (0 during ``"iwm"``'s world-model phase).

    ``"adaptive"`` keeps a baseline, the world model's token accuracy at the first validation, and after each
    step compares the step's training token accuracy with it: above ``baseline + margin`` the world model has
    learned enough and λ is divided by ``rate``; otherwise λ is multiplied by it (clipped to
    [``lambda_min``, ``lambda_max``]).

    >>> controller = LambdaController(DualLoRAConfig(lambda_schedule="step", lambda_steps=((0, 1.0), (2, 0.3))))
    >>> [controller.value(step) for step in range(4)]
    [1.0, 1.0, 0.3, 0.3]
    """

    def __init__(self, config: DualLoRAConfig):
        self.config = config
        self.adaptive_value = config.wm_coef
        self.baseline_accuracy: float | None = None

    def value(self, step: int) -> float:
        """λ at ``step`` (0-based)."""
        config = self.config
        if config.transfer == "iwm":
            return 1.0 if step < config.iwm_steps else 0.0
        if config.lambda_schedule == "step":
            return [value for start, value in config.lambda_steps if start <= step][-1]
        if config.lambda_schedule == "adaptive":
            return self.adaptive_value
        return config.wm_coef

    def policy_weight(self, step: int) -> float:
        """1, except during the world-model-only phase of ``"iwm"``."""
        return 0.0 if self.config.transfer == "iwm" and step < self.config.iwm_steps else 1.0

    def observe_validation(self, token_accuracy: float) -> None:
        """The first validation's world-model token accuracy becomes the adaptive rule's baseline."""
        if self.baseline_accuracy is None:
            self.baseline_accuracy = token_accuracy

    def observe_step(self, token_accuracy: float) -> None:
        """Adapt λ after a training step (``"adaptive"`` only; needs a baseline)."""
        config = self.config
        if config.lambda_schedule != "adaptive" or self.baseline_accuracy is None:
            return
        if token_accuracy > self.baseline_accuracy + config.lambda_adapt_margin:
            self.adaptive_value /= config.lambda_adapt_rate
        else:
            self.adaptive_value *= config.lambda_adapt_rate
        self.adaptive_value = min(max(self.adaptive_value, config.lambda_min), config.lambda_max)

    def state(self) -> dict[str, Any]:
        return {"adaptive_value": self.adaptive_value, "baseline_accuracy": self.baseline_accuracy}

    def load_state(self, state: dict[str, Any]) -> None:
        self.adaptive_value = float(state["adaptive_value"])
        self.baseline_accuracy = state["baseline_accuracy"]
