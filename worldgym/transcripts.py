"""Episode transcripts of a run: what the agent said and saw, one JSON line per episode.

Every validation writes ``<run>/episodes/step-<n>.jsonl``; with ``log_episodes="all"`` a few sampled training
episodes of every step go to ``<run>/episodes/train-step-<n>.jsonl`` too (at most
:data:`TRAIN_EPISODES_PER_STEP`). The records are plain dicts (an agent decides their fields); ``worldgym runs
show`` prints them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from worldgym.config import check_choice
from worldgym.jsonl import read_jsonl
from worldgym.run_folder import EPISODES_DIR

__all__ = ["LOG_EPISODES", "TRAIN_EPISODES_PER_STEP", "LogEpisodes", "check_log_episodes", "read_transcript",
           "transcript_path", "transcript_steps", "write_transcript"]

LogEpisodes = Literal["validation", "all", "none"]
LOG_EPISODES: tuple[str, ...] = ("validation", "all", "none")
TRAIN_EPISODES_PER_STEP = 4  # sampled training episodes kept per step with log_episodes="all"
_FILE = re.compile(r"(train-)?step-(\d+)\.jsonl")


def check_log_episodes(value: Any) -> None:
    """Raise :class:`~worldgym.errors.ConfigError` unless ``value`` is one of :data:`LOG_EPISODES`."""
    check_choice("log_episodes", value, LOG_EPISODES)


def transcript_path(run_dir: str | Path, step: int, training: bool = False) -> Path:
    """``<run>/episodes/step-<step>.jsonl`` (validation) or ``train-step-<step>.jsonl`` (sampled training)."""
    return Path(run_dir) / EPISODES_DIR / f"{'train-' if training else ''}step-{int(step)}.jsonl"


def write_transcript(run_dir: str | Path, step: int, records: Sequence[dict[str, Any]], training: bool = False
                     ) -> Path:
    """Write ``records`` as the transcript of ``step`` (replacing one a resumed run wrote before a kill)."""
    path = transcript_path(run_dir, step, training)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(record, default=str) + "\n" for record in records))
    os.replace(tmp, path)
    return path


def read_transcript(run_dir: str | Path, step: int, training: bool = False) -> list[dict[str, Any]]:
    """The episodes of a transcript ([] when the step has none)."""
    return read_jsonl(transcript_path(run_dir, step, training))


def transcript_steps(run_dir: str | Path, training: bool = False) -> list[int]:
    """The steps that have a (validation, or sampled training) transcript, in order."""
    folder = Path(run_dir) / EPISODES_DIR
    if not folder.is_dir():
        return []
    matches = (_FILE.fullmatch(p.name) for p in folder.iterdir())
    return sorted(int(m.group(2)) for m in matches if m is not None and bool(m.group(1)) == training)
