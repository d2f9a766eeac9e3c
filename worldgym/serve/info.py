"""Which ``info`` keys of each served env a client may read: what it needs to act, never the answer or a path.

An env id without an entry here sends only :data:`COMMON_INFO_KEYS`; serving a new env means deciding its keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CLIENT_INFO_KEYS", "COMMON_INFO_KEYS", "client_info"]

# Every env's step outcome: the library's success contract, the kind of reply, errors and text changes.
COMMON_INFO_KEYS = frozenset({"success", "response_type", "errors", "turn", "observation_changes"})

CLIENT_INFO_KEYS: dict[str, frozenset[str]] = {
    # Tool results only restate what the observation shows; ``raw_text`` (the client's own reply) is not echoed.
    "CSRPhone-v1": COMMON_INFO_KEYS | {"tools", "difficulty", "company", "goal", "split", "observed_values",
                                       "companies", "department", "task_complete", "tool", "unknown_fields",
                                       "values"},
    # Not ``answer`` (the graded answer, also in the step info).
    "MathQA-v1": COMMON_INFO_KEYS | {"system_prompt", "difficulty", "index", "split", "predicted"},
    # Not ``answer`` / ``answer_text`` (the correct option); documents are the task's reading material.
    "LongHealthQA-v0": COMMON_INFO_KEYS | {"system_prompt", "answer_format", "patient_id", "question_no",
                                           "question", "options", "question_type", "documents", "document_ids",
                                           "task", "split", "index", "predicted", "parse"},
    # Not ``answer``; ``score`` is the reward.
    "ReasoningGym-v0": COMMON_INFO_KEYS | {"system_prompt", "index", "dataset", "split", "predicted", "score"},
}


def client_info(env_id: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``info`` that env ``env_id`` shows its clients."""
    allowed = CLIENT_INFO_KEYS.get(env_id, COMMON_INFO_KEYS)
    return {key: value for key, value in info.items() if key in allowed}
