"""JSONL metric logs: append a record, read them back, and cut a log back to a checkpoint on resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["append_jsonl", "read_jsonl", "truncate_jsonl"]


def append_jsonl(path: str | Path, *records: dict[str, Any]) -> None:
    """Append each record as one JSON line (the folder is created if needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)


def _parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every parsable record of a log; torn or blank lines (a crash mid-write) are skipped; none if missing."""
    path = Path(path)
    if not path.is_file():
        return []
    return [record for line in path.read_text().splitlines() if (record := _parse(line)) is not None]


def truncate_jsonl(path: str | Path, key: str, last: float) -> None:
    """Keep only the records whose ``key`` is at most ``last`` (and drop torn lines).

    Called when a run resumes from a checkpoint taken at ``key == last``: lines logged after it, before a crash,
    would otherwise appear twice once the resumed run logs those steps again.

    >>> import tempfile, os; log = os.path.join(tempfile.mkdtemp(), "m.jsonl")
    >>> for step in range(5): append_jsonl(log, {"step": step})
    >>> truncate_jsonl(log, "step", 2); [r["step"] for r in read_jsonl(log)]
    [0, 1, 2]
    """
    path = Path(path)
    if path.is_file():
        kept = [r for r in read_jsonl(path) if r.get(key, 0) <= last]
        path.write_text("".join(json.dumps(r) + "\n" for r in kept))
