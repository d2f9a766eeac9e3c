"""Experiment tracking: every metrics row a trainer writes to ``metrics.jsonl`` also goes to TensorBoard and/or
Weights & Biases, under the same keys (TRL's ``report_to``: ``"none"``, ``"tensorboard"``, ``"wandb"``, ``"all"``
or a list of them). ``metrics.jsonl`` stays the source of truth.

* ``"tensorboard"``: event files under ``<run>/tensorboard`` (torch's ``SummaryWriter``); the config as
  hyperparameters (TensorBoard's HParams tab); a resumed run purges the events logged after its checkpoint.
* ``"wandb"``: a run in ``<run>/wandb`` (project ``worldgym``, named after the run folder), the config as its
  config; ``WANDB_MODE=offline`` works with no network (``wandb sync`` uploads it later).

LLM agents also log a table of sample episodes per validation (:meth:`Tracker.log_episodes`).
Both need the ``tracking`` extra (``pip install 'worldgym[tracking]'``); without it a config that asks for them
is refused when it is built.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from worldgym.config import check_field
from worldgym.errors import ConfigError

__all__ = ["REPORT_TO", "TENSORBOARD_DIR", "Tracker", "check_report_to", "make_tracker", "report_targets"]

REPORT_TO = ("tensorboard", "wandb")  # the backends; "none" and "all" are also accepted
TENSORBOARD_DIR = "tensorboard"
WANDB_PROJECT = "worldgym"
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
_TABLE_COLUMNS = ("episode", "success", "reward", "num_turns", "response_types", "last_reply")


def report_targets(report_to: str | Sequence[str]) -> tuple[str, ...]:
    """The backends ``report_to`` names (``"none"``: none; ``"all"``: every one), without checking them."""
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if "all" in names:
        return REPORT_TO
    return tuple(dict.fromkeys(name for name in names if name != "none"))


def check_report_to(report_to: Any) -> None:
    """Raise :class:`~worldgym.errors.ConfigError` unless ``report_to`` is "none", "all", a backend or a list of
    backends, each installed.

    >>> check_report_to(["tensorboard", "mlflow"])
    Traceback (most recent call last):
    worldgym.errors.ConfigError: report_to=['tensorboard', 'mlflow'] is invalid: use 'none', 'all', one of ('tensorboard', 'wandb') or a list of them
    """
    names = [report_to] if isinstance(report_to, str) else report_to
    ok = isinstance(names, (list, tuple)) and all(n in ("none", "all", *REPORT_TO) for n in names)
    check_field(ok, "report_to", report_to, f"use 'none', 'all', one of {REPORT_TO} or a list of them")
    for name in report_targets(report_to):
        if importlib.util.find_spec(_PACKAGES[name]) is None:
            raise ConfigError(f"report_to={report_to!r} is invalid: the {name!r} package is not installed; install "
                              "the tracking extra: pip install 'worldgym[tracking]'")


class Tracker:
    """Sends a run's metrics, config and episode tables to the backends of ``report_to``.

    Args:
        report_to: as the config's field.
        run_dir: the run folder (the backends' files go under it).
        config: the run's settings, logged as hyperparameters (nested dicts are flattened with ``/``).
        resume_step: the step a resumed run continues from (TensorBoard drops what was logged after it);
            None for a fresh run.
    """

    def __init__(self, report_to: str | Sequence[str], run_dir: str | Path, config: Mapping[str, Any],
                 resume_step: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.targets = report_targets(report_to)
        self._tensorboard = self._wandb = None
        if "tensorboard" in self.targets:
            self._tensorboard = _tensorboard_writer(self.run_dir, config, resume_step)
        if "wandb" in self.targets:
            self._wandb = _wandb_run(self.run_dir, config, resume_step)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Every numeric value of ``metrics`` (a ``metrics.jsonl`` row) under its own key, at ``step``."""
        scalars = {k: float(v) for k, v in metrics.items() if _is_number(v) and k != "step"}
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def log_episodes(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        """A table of transcript records (:mod:`worldgym.transcripts`): outcome, reward, turns and last reply."""
        rows = [[r.get("episode"), bool(r.get("success")), r.get("reward"), r.get("num_turns"),
                 " ".join(str(t) for t in r.get("response_types", [])), _last_reply(r)] for r in records]
        if self._tensorboard is not None:
            header = "| " + " | ".join(_TABLE_COLUMNS) + " |\n|" + "---|" * len(_TABLE_COLUMNS) + "\n"
            body = "".join("| " + " | ".join(_cell(v) for v in row) + " |\n" for row in rows)
            self._tensorboard.add_text("episodes", header + body, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            import wandb

            self._wandb.log({"episodes": wandb.Table(columns=list(_TABLE_COLUMNS), data=rows)}, step=step)

    def close(self) -> None:
        """Flush and close every backend."""
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def make_tracker(report_to: str | Sequence[str], run_dir: str | Path, config: Mapping[str, Any],
                 resume_step: int | None = None) -> Tracker | None:
    """A :class:`Tracker`, or None when ``report_to`` names no backend (nothing to send)."""
    return Tracker(report_to, run_dir, config, resume_step) if report_targets(report_to) else None


def _tensorboard_writer(run_dir: Path, config: Mapping[str, Any], resume_step: int | None):
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    purge = None if resume_step is None else resume_step + 1
    writer = SummaryWriter(str(run_dir / TENSORBOARD_DIR), purge_step=purge)
    if resume_step is None:  # the config once per run, in the HParams tab
        flat = {k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v, default=str)
                for k, v in _flatten(config).items()}
        for summary in hparams(flat, {}):
            writer.file_writer.add_summary(summary)
    return writer


def _wandb_run(run_dir: Path, config: Mapping[str, Any], resume_step: int | None):
    import wandb

    id_file = run_dir / "wandb" / "run_id"
    id_file.parent.mkdir(parents=True, exist_ok=True)
    run_id = id_file.read_text().strip() if resume_step is not None and id_file.is_file() else uuid.uuid4().hex[:8]
    id_file.write_text(run_id + "\n")
    return wandb.init(project=WANDB_PROJECT, name=run_dir.resolve().name, dir=str(run_dir), id=run_id,
                      config=dict(config), resume="allow", reinit="create_new")


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{prefix}{key}/")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _last_reply(record: Mapping[str, Any]) -> str:
    replies = [m.get("content", "") for m in record.get("messages", []) if m.get("role") == "assistant"]
    return replies[-1][:200] if replies else ""


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
