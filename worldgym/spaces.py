"""Tool-call action spaces: ``ToolCall``, ``Tool`` and ``ToolCallSpace`` (a real ``gymnasium.Space``).

A text environment whose agent acts by calling tools declares a :class:`ToolCallSpace`. The space knows each tool's
JSON schema, so it can say whether a call is valid (``contains``), explain why not (``validate``), draw valid calls
from its seeded RNG (``sample``, used for fuzzing) and export the schemas in the OpenAI function format that chat
templates take (``openai_tools``).

>>> space = ToolCallSpace([Tool("add", "Add two integers.", {"type": "object",
...     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]})], seed=0)
>>> space.contains(ToolCall("add", {"a": 1, "b": 2}))
True
>>> space.validate(ToolCall("add", {"a": 1}))
["add: missing required argument 'b'"]
>>> space.sample() in space
True
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium.spaces import Space

__all__ = ["COPY_ANNOTATION", "Tool", "ToolCall", "ToolCallError", "ToolCallSpace", "validate_json",
           "PRINTABLE_CHARSET"]

# Characters text observations and actions may contain (printable ASCII, incl. whitespace).
PRINTABLE_CHARSET = frozenset(string.printable)
# A tool schema's mark on an argument whose value is copied from an earlier observation (a phone number from a
# search result, an account number from a form). Envs list the copyable strings each observation shows in
# ``info["observed_values"]``; constrained decoding (``worldgym.agents.llm.constrained``) and the copy probe
# read both. Validation ignores the mark.
COPY_ANNOTATION = "x-copy-from-observations"

_SAMPLE_CHARSET = string.ascii_letters + string.digits + " -_"
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (Mapping,),
    "null": (type(None),),
}


@dataclass(frozen=True, eq=False)
class ToolCall:
    """One call of a named tool with JSON-compatible keyword arguments.

    Equality and hashing follow JSON semantics: ``1`` and ``1.0`` are the same argument, ``True`` and ``1`` are not.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The call as compact JSON ``{"name": ..., "arguments": {...}}`` (Hermes tool-call body)."""
        arguments = dict(self.arguments) if isinstance(self.arguments, Mapping) else self.arguments
        return json.dumps({"name": self.name, "arguments": arguments}, sort_keys=True, default=repr)

    def _key(self) -> str:
        return _canonical_json({"name": self.name, "arguments": self.arguments})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolCall) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True)
class ToolCallError:
    """What a model's text became when it held no valid tool call: the reason, and the raw text.

    Tool envs accept it as an action: it costs a turn and is answered with an error observation, so a model can
    recover from a malformed call instead of crashing the episode.
    """

    message: str
    raw_text: str = ""


@dataclass(frozen=True)
class Tool:
    """A tool the agent may call: a name, a description and a JSON schema (an ``object``) for its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Tool name must be an identifier string, got {self.name!r}")
        if self.parameters.get("type") != "object":
            raise ValueError(
                f"Tool {self.name!r}: `parameters` must be a JSON schema of type 'object', "
                f"got type {self.parameters.get('type')!r}"
            )

    def openai(self) -> dict[str, Any]:
        """This tool in the OpenAI function format (what ``apply_chat_template(tools=...)`` takes)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints and mappings as dicts, so JSON-equal values serialise alike."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _canonical_json(value: Any) -> str:
    """One string per JSON value (never raises: unknown objects are written with ``repr``)."""
    return json.dumps(_canonical(value), sort_keys=True, default=repr)


def validate_json(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Validate ``value`` against the JSON-schema subset tool schemas use; return error messages (empty if valid).

    Supported keywords: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
    ``additionalProperties`` (bool or schema), ``items``, ``minItems``, ``maxItems``, ``uniqueItems``,
    ``minLength``, ``maxLength``, ``minimum``, ``maximum``. A hand-written subset rather than ``jsonschema``: it
    runs on every env step (about 10x faster) and keeps the core free of extra dependencies; the tests check it
    against ``jsonschema`` on random values.
    """
    where = path or "arguments"
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        type_names = [types] if isinstance(types, str) else list(types)
        if not any(_is_json_type(value, t) for t in type_names):
            return [f"{where} must be of type {' or '.join(type_names)}, got {_json_type_name(value)}"]
    if "enum" in schema and not any(_json_equal(value, option) for option in schema["enum"]):
        errors.append(f"{where} must be one of {list(schema['enum'])}, got {value!r}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        errors.append(f"{where} must equal {schema['const']!r}, got {value!r}")
    if isinstance(value, str):
        errors += _validate_length(value, schema, where, "characters")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where} must be <= {schema['maximum']}, got {value}")
    elif isinstance(value, (list, tuple)):
        errors += _validate_array(value, schema, where)
    elif isinstance(value, Mapping):
        errors += _validate_object(value, schema, path)
    return errors


def _validate_length(value: str, schema: Mapping[str, Any], where: str, unit: str) -> list[str]:
    errors = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{where} must have at least {schema['minLength']} {unit}, got {len(value)}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{where} must have at most {schema['maxLength']} {unit}, got {len(value)}")
    return errors


def _validate_array(value: Sequence[Any], schema: Mapping[str, Any], where: str) -> list[str]:
    errors = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{where} must have at least {schema['minItems']} items, got {len(value)}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{where} must have at most {schema['maxItems']} items, got {len(value)}")
    if schema.get("uniqueItems") and len({_canonical_json(v) for v in value}) != len(value):
        errors.append(f"{where} must not contain duplicate items")
    if "items" in schema:
        for i, item in enumerate(value):
            errors += validate_json(item, schema["items"], f"{where}[{i}]")
    return errors


def _validate_object(value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    prefix = f"{path}." if path else ""
    errors = []
    for key in schema.get("required", ()):
        if key not in value:
            errors.append(f"missing required argument '{prefix}{key}'")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if not isinstance(key, str):
            errors.append(f"argument names must be strings, got {key!r}")
        elif key in properties:
            errors += validate_json(item, properties[key], prefix + key)
        elif extra is False:
            errors.append(f"unexpected argument '{prefix}{key}' (allowed: {sorted(properties)})")
        elif isinstance(extra, Mapping):
            errors += validate_json(item, extra, prefix + key)
    return errors


def _is_json_type(value: Any, type_name: str) -> bool:
    if type_name not in _JSON_TYPES:
        raise ValueError(f"Unsupported JSON schema type {type_name!r}; expected one of {sorted(_JSON_TYPES)}")
    if isinstance(value, bool):
        return type_name == "boolean"
    if type_name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES[type_name])


def _json_type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _is_json_type(value, name):
            return name
    return type(value).__name__


def _json_equal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (_is_json_type(a, "number") and _is_json_type(b, "number") and a == b)


class ToolCallSpace(Space[ToolCall]):
    """The space of valid calls of a fixed set of tools; a ``gymnasium.Space`` with ``shape=None``.

    Args:
        tools: the tools, as :class:`Tool` objects or OpenAI-format dicts (``{"type": "function", "function":
            {"name", "description", "parameters"}}``). Names must be unique.
        seed: seed for :meth:`sample`.
    """

    def __init__(self, tools: Sequence[Tool | Mapping[str, Any]], seed: int | np.random.Generator | None = None):
        parsed = [tool if isinstance(tool, Tool) else _tool_from_openai(tool) for tool in tools]
        if not parsed:
            raise ValueError("ToolCallSpace needs at least one tool, got an empty sequence")
        names = [tool.name for tool in parsed]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"ToolCallSpace tool names must be unique, got duplicates {duplicates}")
        self.tools: dict[str, Tool] = {tool.name: tool for tool in parsed}
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Tool calls have no fixed-size numeric form."""
        return False

    def validate(self, call: Any) -> list[str]:
        """Why ``call`` is not a valid element of this space (an empty list when it is)."""
        if not isinstance(call, ToolCall):
            return [f"expected a ToolCall, got {type(call).__name__}"]
        tool = self.tools.get(call.name) if isinstance(call.name, str) else None
        if tool is None:
            return [f"unknown tool {call.name!r}; available tools: {list(self.tools)}"]
        if not isinstance(call.arguments, Mapping):
            return [f"{call.name}: arguments must be an object, got {_json_type_name(call.arguments)}"]
        return [f"{call.name}: {message}" for message in validate_json(call.arguments, tool.parameters)]

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a ToolCall of a known tool whose arguments satisfy that tool's schema."""
        return not self.validate(x)

    def sample(self, mask: Any = None, probability: Any = None) -> ToolCall:
        """A random valid call: a uniformly chosen tool with arguments drawn from its schema."""
        if mask is not None or probability is not None:
            raise NotImplementedError("ToolCallSpace.sample does not support `mask` or `probability`")
        names = list(self.tools)
        tool = self.tools[names[int(self.np_random.integers(len(names)))]]
        return ToolCall(tool.name, _sample_json(tool.parameters, self.np_random))

    def openai_tools(self) -> list[dict[str, Any]]:
        """All tools in the OpenAI function format, for a chat template's ``tools=`` argument."""
        return [tool.openai() for tool in self.tools.values()]

    def to_jsonable(self, sample_n: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """Calls as JSON-compatible dicts."""
        return [{"name": call.name, "arguments": dict(call.arguments)} for call in sample_n]

    def from_jsonable(self, sample_n: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
        """Calls from JSON-compatible dicts."""
        return [ToolCall(item["name"], dict(item["arguments"])) for item in sample_n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolCallSpace) and self.tools == other.tools

    def __hash__(self) -> int:
        return hash(tuple(self.tools))

    def __repr__(self) -> str:
        return f"ToolCallSpace({list(self.tools)})"


def _tool_from_openai(spec: Mapping[str, Any]) -> Tool:
    function = spec.get("function", spec)
    try:
        return Tool(function["name"], function.get("description", ""), function["parameters"])
    except KeyError as missing:
        raise ValueError(f"Tool spec is missing the field {missing}; got {dict(spec)!r}") from None


def _sample_json(schema: Mapping[str, Any], rng: np.random.Generator) -> Any:
    """Draw a value satisfying ``schema`` (the subset :func:`validate_json` supports)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        options = list(schema["enum"])
        return options[int(rng.integers(len(options)))]
    kind = schema.get("type", "string")
    if not isinstance(kind, str):
        kind = list(kind)[int(rng.integers(len(kind)))]
    if kind == "string":
        high = schema.get("maxLength", max(schema.get("minLength", 1), 16))
        low = min(schema.get("minLength", 1), high)
        length = int(rng.integers(low, high + 1))
        return "".join(_SAMPLE_CHARSET[i] for i in rng.integers(len(_SAMPLE_CHARSET), size=length))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("maximum", 1000) - 2000)
        high = schema.get("maximum", low + 2000)
        if kind == "integer":
            return int(rng.integers(math.ceil(low), math.floor(high) + 1))
        return float(rng.uniform(low, high))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    if kind == "array":
        return _sample_array(schema, rng)
    if kind == "object":
        return _sample_object(schema, rng)
    raise ValueError(f"Cannot sample JSON schema type {kind!r}")


def _sample_array(schema: Mapping[str, Any], rng: np.random.Generator) -> list[Any]:
    low = schema.get("minItems", 0)
    high = schema.get("maxItems", low + 3)
    length = int(rng.integers(low, high + 1))
    item_schema = schema.get("items", {"type": "string"})
    items: list[Any] = []
    for _ in range(8 * length):  # unique items: bounded retries, then return what we have (>= minItems enforced)
        if len(items) == length:
            break
        item = _sample_json(item_schema, rng)
        if not schema.get("uniqueItems") or item not in items:
            items.append(item)
    if len(items) < low:
        raise ValueError(f"Cannot sample {low} unique items from schema {dict(item_schema)!r}")
    return items


def _sample_object(schema: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    required = set(schema.get("required", ()))
    value = {}
    for key, sub_schema in schema.get("properties", {}).items():
        if key in required or rng.random() < 0.5:
            value[key] = _sample_json(sub_schema, rng)
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, Mapping):
        for i in range(int(rng.integers(0, 3))):
            value[f"key_{i}"] = _sample_json(extra, rng)
    return value
