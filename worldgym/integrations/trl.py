"""TRL's ``GRPOTrainer(environment_factory=...)`` on any worldgym text env: one method per tool, the env owns
the reward.

>>> import gymnasium as gym
>>> CSR = environment_factory("CSRPhone-v1", difficulty=1)
>>> env = CSR()
>>> env.reset().startswith("You are a phone assistant")
True
>>> print(env.search_company.__doc__.splitlines()[0])
Look up a company in the phone book; returns its departments and phone numbers, plus companies with similar names.
>>> env.get_reward()
0.0
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any, Union

import gymnasium as gym

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.spaces import Tool, ToolCall, ToolCallSpace

__all__ = ["ANSWER_TOOL", "environment_factory", "task_dataset"]

# A text env (one answer per episode) gets this one tool: the answer is submitted by calling it.
ANSWER_TOOL = Tool("answer", "Submit your final answer; the episode ends and the answer is graded.", {
    "type": "object", "properties": {"text": {"type": "string", "description": "the final answer"}},
    "required": ["text"]})
_RESERVED = {"reset", "get_reward"}  # TRL's own method names
_PYTHON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None),
                                 "object": dict}
EPISODE_OVER = "The episode is over: no more tool calls are taken."


def environment_factory(env_id: str, seed: int | None = None, **env_kwargs: Any) -> type:
    """A class TRL's ``GRPOTrainer(environment_factory=...)`` takes for ``gym.make(env_id, **env_kwargs)``.

    Each instance holds one env. ``reset(**row)`` starts a task (the row's ``seed`` picks it, see
    :func:`task_dataset`; without one the instance's RNG draws the next, first seeded from ``seed`` plus the
    instance's number) and returns its prompt, or None when the row's prompt already ends with it. Each tool of
    the env's ``ToolCallSpace`` is a method whose signature (type hints) and Google docstring come from the
    tool's JSON schema; it steps the env and returns the observation text. A text env (one answer per episode)
    gets one tool, ``answer(text)``. ``get_reward()`` returns the episode's summed reward; ``success`` says
    whether the env reported the task done. Calls the env rejects get its error observation and cost a turn,
    as in-process; calls after the episode ended return :data:`EPISODE_OVER`.

    For GRPO, give the trainer :func:`task_dataset` rows so a group's generations share a task.

    Raises:
        TypeError: the env acts with neither tool calls nor text.
        ValueError: a tool is named ``reset`` or ``get_reward``, or ``gym.make`` rejects the arguments.
    """
    probe = gym.make(env_id, **env_kwargs)
    if isinstance(probe.action_space, ToolCallSpace):
        tools, text_env = list(probe.action_space.tools.values()), False
    elif isinstance(probe.action_space, gym.spaces.Text):
        tools, text_env = [ANSWER_TOOL], True
    else:
        raise TypeError(f"environment_factory needs a text or tool-call env; {env_id} has {probe.action_space}")
    probe.close()
    clashes = sorted(_RESERVED & {tool.name for tool in tools})
    if clashes:
        raise ValueError(f"{env_id}: tools named {clashes} would shadow TRL's environment methods")
    namespace: dict[str, Any] = {
        "__doc__": f"{env_id} for TRL's environment_factory: one method per tool; get_reward() is the return.",
        "__module__": __name__,
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs),
        "base_seed": seed,
        "text_env": text_env,
        "_instances": 0,
    }
    namespace.update({tool.name: _tool_method(tool, text_env) for tool in tools})
    return type(re.sub(r"\W", "_", env_id), (_EnvironmentBase,), namespace)


class _EnvironmentBase:
    """What every generated class shares (private names only: TRL exposes every public method as a tool)."""

    env_id: str
    env_kwargs: dict[str, Any]
    base_seed: int | None
    text_env: bool
    _instances: int

    def __init__(self) -> None:
        cls = type(self)
        self._env = gym.make(cls.env_id, **cls.env_kwargs)
        self._next_seed = None if cls.base_seed is None else cls.base_seed + cls._instances
        cls._instances += 1
        self._return = 0.0
        self._over = True
        self.success = False

    def reset(self, seed: int | None = None, prompt: Any = None, **row: Any) -> str | None:
        """Start a task (``seed`` from a :func:`task_dataset` row); its prompt, unless ``prompt`` ends with it."""
        if seed is None:
            seed, self._next_seed = self._next_seed, None
        text, _ = self._env.reset(seed=seed)
        self._return, self._over, self.success = 0.0, False, False
        return None if _last_text(prompt).endswith(text) else text

    def get_reward(self) -> float:
        """The episode's summed reward so far."""
        return self._return

    def _step(self, action: Any) -> str:
        if self._over:
            return EPISODE_OVER
        text, reward, terminated, truncated, info = self._env.step(action)
        self._return += float(reward)
        self.success = self.success or info.get("success") is True
        self._over = terminated or truncated
        return text


def _last_text(prompt: Any) -> str:
    """The last message's text of a conversational prompt (or the prompt itself when it is a string)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and isinstance(prompt[-1], Mapping):
        content = prompt[-1].get("content")
        return content if isinstance(content, str) else ""
    return ""


def _tool_method(tool: Tool, text_env: bool) -> Any:
    """A method named after ``tool`` with the schema's signature and docstring, calling the env."""
    if text_env:
        def method(self: _EnvironmentBase, **arguments: Any) -> str:
            return self._step(arguments.get("text"))
    else:
        def method(self: _EnvironmentBase, **arguments: Any) -> str:
            return self._step(ToolCall(tool.name, {k: v for k, v in arguments.items() if v is not None}))
    properties: Mapping[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", ()))
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for name in sorted(properties, key=lambda name: name not in required):  # required ones first
        hint = _python_type(properties[name])
        if name not in required:
            hint = hint | None
        annotations[name] = hint
        default = inspect.Parameter.empty if name in required else None
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
    method.__name__ = method.__qualname__ = tool.name
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)
    method.__annotations__ = annotations
    method.__doc__ = _docstring(tool, properties)
    return method


def _python_type(schema: Mapping[str, Any]) -> Any:
    """The type hint of a JSON schema (what transformers turns back into a schema for the chat template)."""
    kinds = schema.get("type", "string")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    hints = []
    for kind in kinds:
        if kind == "array":
            hints.append(list[_python_type(schema.get("items", {"type": "string"}))])
        else:
            hints.append(_PYTHON_TYPES.get(kind, str))
    return hints[0] if len(hints) == 1 else Union[tuple(hints)]  # noqa: UP007 - a runtime-built union


def _docstring(tool: Tool, properties: Mapping[str, Any]) -> str:
    """The tool's description and one ``Args:`` line per argument (TRL's schema needs each described)."""
    lines = [tool.description or f"Call the {tool.name} tool.", ""]
    if properties:
        lines.append("Args:")
        lines += [f"    {name}: {_describe(schema)}" for name, schema in properties.items()]
        lines.append("")
    lines += ["Returns:", "    The environment's reply."]
    return "\n".join(lines)


def _describe(schema: Mapping[str, Any]) -> str:
    """An argument's description, or one made from its schema (type and bounds)."""
    if schema.get("description"):
        return str(schema["description"]).replace("\n", " ")
    kind = schema.get("type", "value")
    name = "/".join(kind) if isinstance(kind, list) else str(kind)
    parts = [f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"]
    if "enum" in schema:
        parts.append(f"one of {list(schema['enum'])}")
    if kind == "array" and "items" in schema:
        parts.append(f"of {schema['items'].get('type', 'value')} items")
    if kind == "object" and schema.get("properties"):
        parts.append(f"with keys {', '.join(schema['properties'])}")
    for key, word in (("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
                      ("minItems", "at least {} items"), ("maxItems", "at most {} items"),
                      ("minimum", ">= {}"), ("maximum", "<= {}")):
        if key in schema:
            parts.append(word.format(schema[key]))
    return ", ".join(parts)


def task_dataset(env_id: str, num_tasks: int, seed: int = 0, **env_kwargs: Any) -> Any:
    """A ``datasets.Dataset`` of ``num_tasks`` task prompts of ``gym.make(env_id, **env_kwargs)`` for TRL.

    Row ``i`` is the task ``reset(seed=seed + i)`` draws: ``prompt`` (a system message when the env gives
    ``info["system_prompt"]``, then the task as the user message) and ``seed``. Pick the split through
    ``env_kwargs`` (``split="validation"`` for CSRPhone-v1) and pass the same ``env_kwargs`` to
    :func:`environment_factory`, whose ``reset`` then replays each row's task.
    """
    from datasets import Dataset

    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        raise ValueError(f"num_tasks must be an int >= 1, got {num_tasks!r}")
    env = gym.make(env_id, **env_kwargs)
    rows = []
    for index in range(num_tasks):
        text, info = env.reset(seed=seed + index)
        system = [{"role": "system", "content": info["system_prompt"]}] if info.get("system_prompt") else []
        rows.append({"prompt": [*system, {"role": "user", "content": text}], "seed": seed + index})
    env.close()
    return Dataset.from_list(rows)
