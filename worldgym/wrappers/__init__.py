"""Wrappers: text/tool-call bridges and other env transforms.

``SB3VecEnv`` (the Stable-Baselines3 bridge) and ``OpenEnvGym`` (an OpenEnv server as a Gymnasium env) load on
first use and stay out of ``__all__``, so worldgym (and ``from worldgym.wrappers import *``) works without
stable-baselines3 or openenv-core.
"""

from __future__ import annotations

import importlib
from typing import Any

from worldgym.wrappers.tool_call_text import ParseToolCall, format_tool_call, parse_tool_call

_LAZY = {"SB3VecEnv": "worldgym.wrappers.sb3", "OpenEnvGym": "worldgym.wrappers.openenv"}
__all__ = ["ParseToolCall", "format_tool_call", "parse_tool_call"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
