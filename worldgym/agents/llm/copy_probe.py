"""The copy probe: how often a policy's copied tool arguments are exactly values the tools showed it earlier.

A tool schema marks the arguments that must be copied (:data:`worldgym.spaces.COPY_ANNOTATION`; CSRPhone-v1:
``phone_number`` and the auth values); the env lists each observation's copyable strings in
``info["observed_values"]``. The probe counts every marked argument of every parsed call in the episodes and
the fraction equal to a value shown before that call. An empty string is no attempt to copy (constrained
decoding writes one where nothing was shown yet) and is not counted. It separates "cannot copy" from "copies the wrong
thing": a policy that always calls the wrong department with a correctly copied number scores 1.0 here and
0 on the task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worldgym.agents.llm.constrained import copied_argument_keys
from worldgym.agents.llm.rollout import Episode
from worldgym.spaces import ToolCall
from worldgym.wrappers import parse_tool_call

__all__ = ["CopyProbe", "copy_probe"]


@dataclass(frozen=True)
class CopyProbe:
    """``copied`` of ``arguments`` marked arguments were exact copies of earlier observed values."""

    arguments: int
    copied: int

    @property
    def rate(self) -> float:
        """The copied fraction (NaN when no call had a marked argument)."""
        return self.copied / self.arguments if self.arguments else float("nan")


def copy_probe(episodes: Sequence[Episode]) -> CopyProbe:
    """Probe the episodes' calls; the marked keys come from each episode's reset ``tools``."""
    arguments = copied = 0
    for episode in episodes:
        keys = copied_argument_keys(episode.reset_info.get("tools") or [])
        # the reset observation's values (those the collector kept: they occur in the prompt)
        seen = {v for v in episode.reset_info.get("observed_values", ()) if v in episode.observed_values}
        for turn in episode.turns:
            call = parse_tool_call(turn.action)
            if isinstance(call, ToolCall):
                for value in _marked_values(call.arguments, keys):
                    arguments += 1
                    copied += value in seen
            observation = turn.observation
            seen.update(v for v in turn.info.get("observed_values", ()) if isinstance(v, str) and v in observation)
    return CopyProbe(arguments, copied)


def _marked_values(arguments: Mapping[str, Any], keys: frozenset[str]) -> Iterator[Any]:
    """Values of marked keys at any depth of a call's arguments (non-strings count, as failed copies)."""
    for key, value in arguments.items():
        if key in keys and not isinstance(value, (dict, list)):
            if value != "":
                yield value
        elif isinstance(value, Mapping):
            yield from _marked_values(value, keys)
