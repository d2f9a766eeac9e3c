"""The one shape every agent has: a ``<Agent>Config`` dataclass and a ``<Agent>Trainer(config, ...)``.

An agent folder exports both. The trainer runs the whole job, so a user's code, ``examples/train_<agent>.py``
and the benchmarks drive every agent the same way::

    trainer = GRPOTrainer(GRPOConfig(env_id="CSRPhone-v1", num_steps=20))
    history = trainer.train()            # one metrics dict per logged step, also in <output_dir>/metrics.jsonl
    metrics = trainer.evaluate()         # held-out figures, keys "eval/..."
    trainer.save("runs/x/checkpoint")    # one checkpoint format (worldgym.checkpointing)
    trainer.load("runs/x/checkpoint")    # the same run continues exactly
    trainer.close()

Every agent names the same things alike (``tests/agents/test_agent_shape.py`` checks it):

- ``config.num_steps``: the run's budget, in the agent's unit (GRPO / dual LoRA: a training step; cartridge: an
  Adam step; Z-token PPO: a PPO iteration, one rollout and its update; Dreamer: a policy step, env steps summed
  over the envs);
- ``config.output_dir``: the run folder (``metrics.jsonl``, checkpoints);
- ``config.learning_rate``: the optimiser's learning rate; a second optimiser or parameter group is
  ``<part>_learning_rate`` (dual LoRA ``wm_learning_rate``; Dreamer's three sit in ``config.optim``);
- every history row has ``"step"``: the budget spent when it was logged (0: before training);
- every training loss is logged as ``"loss/<name>"``.

Renamed fields keep their old names for one release (:func:`worldgym.config.renamed_fields`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

__all__ = ["BUDGET", "LEARNING_RATE", "LOSS_PREFIX", "RUN_FOLDER", "STEP_KEY", "AgentTrainer"]

BUDGET = "num_steps"  # the config field of the run's budget
RUN_FOLDER = "output_dir"  # the config field of the run folder
LEARNING_RATE = "learning_rate"  # the config field of the learning rate (``<part>_learning_rate`` for a second)
STEP_KEY = "step"  # every history row's key: the budget spent when it was logged
LOSS_PREFIX = "loss/"  # every training loss's metric key starts with it


@runtime_checkable
class AgentTrainer(Protocol):
    """What :class:`GRPOTrainer`, :class:`DualLoRATrainer`, :class:`CartridgeDistillTrainer`,
    :class:`ZTokenPPOTrainer` and :class:`DreamerTrainer` (and every agent to come) offer."""

    config: Any
    history: list[dict[str, Any]]

    def train(self) -> list[dict[str, Any]]:
        """Run until the config's budget (``num_steps``) is spent (continuing a loaded run); return every logged
        metrics row (each with ``"step"``)."""
        ...

    def evaluate(self, env: gym.Env | gym.vector.VectorEnv | None = None) -> dict[str, float]:
        """Held-out metrics (``eval/*``) on ``env``, or on the config's evaluation env when None."""
        ...

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint from which :meth:`load` continues the run exactly; returns its folder."""
        ...

    def load(self, path: str | Path) -> None:
        """Restore a :meth:`save` checkpoint (a :class:`~worldgym.errors.CheckpointError` names what is wrong)."""
        ...

    def close(self) -> None:
        """Release envs, engines and worker processes."""
        ...
