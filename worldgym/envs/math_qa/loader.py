"""Load a user's GSM8K file (jsonl or parquet with ``question``/``answer`` columns) as MathProblems."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gymnasium.error import DependencyNotInstalled

from worldgym.envs.math_qa.problems import MathProblem
from worldgym.envs.math_qa.reward import normalize_number
from worldgym.errors import DatasetError

__all__ = ["load_gsm8k"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def load_gsm8k(path: str | Path, difficulty: int = 0) -> list[MathProblem]:
    """Problems from a GSM8K file: each row has ``question`` and ``answer`` (a worked solution ending ``####
    N``). Questions and solutions are kept exactly as the file holds them (any Unicode character).

    Args:
        path: a ``.jsonl`` / ``.json`` (one object per line) or ``.parquet`` file (parquet needs ``pyarrow``).
        difficulty: the level recorded on every problem (GSM8K has none; 0 means "unrated").

    Raises:
        FileNotFoundError: the file does not exist.
        DatasetError: (a ``ValueError``) the file is not UTF-8 JSON lines, a row lacks a field, holds a lone
            surrogate (``"\\ud800"``: not Unicode text) or its answer has no ``#### <number>`` line; the
            message names the file and the row.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GSM8K file not found: {path}")
    rows = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
    problems = [_to_problem(row, i, path, difficulty) for i, row in enumerate(rows, start=1)]
    if not problems:
        raise DatasetError(f"{path} holds no problems")
    return problems


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    # Only "\n" ends a JSON line: str.splitlines() would also split at U+2028, U+0085 and other characters a
    # question may hold as they are.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError, ValueError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error) or "nested too deeply"
            raise DatasetError(f"{path}: line {number} is not valid JSON ({reason})") from None
    return rows


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise DependencyNotInstalled("Reading parquet needs pyarrow: `pip install pyarrow`") from error
    return pq.read_table(path, columns=["question", "answer"]).to_pylist()


def _to_problem(row: object, number: int, path: Path, difficulty: int) -> MathProblem:
    if (
        not isinstance(row, dict)
        or not isinstance(row.get("question"), str)
        or not isinstance(row.get("answer"), str)
    ):
        raise DatasetError(f"{path}: row {number} needs string fields 'question' and 'answer'")
    for key in ("question", "answer"):
        surrogate = _SURROGATE.search(row[key])
        if surrogate:
            raise DatasetError(f"{path}: row {number}, field {key!r}: lone surrogate "
                               f"{surrogate.group()!r} at character {surrogate.start()} (not Unicode text)")
    solution = row["answer"]
    final = solution.rsplit("####", 1)[-1] if "####" in solution else None
    value = normalize_number(final.strip()) if final is not None else None
    if value is None:
        raise DatasetError(f"{path}: row {number} answer has no final '#### <number>' line: {solution[-60:]!r}")
    return MathProblem(row["question"], solution, value, difficulty, source=str(path.name))
