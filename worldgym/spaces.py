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
import reprlib
import string
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium.spaces import Space

__all__ = ["COPY_ANNOTATION", "MAX_ARGUMENT_DEPTH", "MAX_INT_DIGITS", "MAX_VALIDATION_ERRORS", "PRINTABLE_CHARSET",
           "Tool", "ToolCall", "ToolCallError", "ToolCallSpace", "invalid_call_text", "nesting_exceeds",
           "validate_json"]

# Characters text observations and actions may contain (printable ASCII, incl. whitespace).
PRINTABLE_CHARSET = frozenset(string.printable)
# A tool schema's mark on an argument whose value is copied from an earlier observation (a phone number from a
# search result, an account number from a form). Envs list the copyable strings each observation shows in
# ``info["observed_values"]``; constrained decoding (``worldgym.agents.llm.constrained``) and the copy probe
# read both. Validation ignores the mark.
COPY_ANNOTATION = "x-copy-from-observations"
# Arguments nested deeper than this (lists and objects) are invalid. Tool schemas nest a few levels; the bound
# keeps validation, hashing and JSON writing far from Python's recursion limit whatever a caller sends.
MAX_ARGUMENT_DEPTH = 32
# Integers with more digits are never read from tool-call text nor printed in decimal here: Python refuses
# int <-> str conversions past its digit limit, which can be set as low as 640.
MAX_INT_DIGITS = 600
# Validation stops once it has this many errors for one value: a call with a million bad items costs a
# bounded answer, not a million messages.
MAX_VALIDATION_ERRORS = 10
_INT_BOUND = 10**MAX_INT_DIGITS

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
    Neither ever raises; values no valid call holds (see :func:`_plain`) compare by a marker.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The call as JSON ``{"name": ..., "arguments": {...}}`` (the Hermes tool-call body): the name first, so
        a model picks the tool before it writes the arguments, and the arguments in their own order.

        Never raises: unknown objects are written with ``repr``, and what no valid call holds (integers of
        more than :data:`MAX_INT_DIGITS` digits, nesting past :data:`MAX_ARGUMENT_DEPTH`, a list holding
        itself) as marker strings.

        >>> ToolCall("lookup", {"company": "Acme", "city": "Oslo"}).to_json()
        '{"name": "lookup", "arguments": {"company": "Acme", "city": "Oslo"}}'
        """
        return json.dumps({"name": _plain(self.name), "arguments": _plain(self.arguments)}, default=repr)

    def summary(self, max_chars: int = 2000) -> str:
        """The call as :meth:`to_json` when that is short (at most ``max_chars`` characters), else a cut repr;
        its cost does not grow with the arguments' size (what an env keeps of a huge call).

        >>> ToolCall("lookup", {"ids": list(range(10**6))}).summary(60)
        "lookup {'ids': [0, 1, 2, 3, 4, 5, 6, 7, ...]}"
        """
        if _fits(self.arguments, max_chars):
            try:
                text = self.to_json()
            except (ValueError, TypeError, RecursionError):  # e.g. an int over Python's digit limit, a cycle
                text = None
            if text is not None and len(text) <= max_chars:
                return text
        name = self.name if isinstance(self.name, str) and len(self.name) <= 80 else _brief(self.name)
        try:
            arguments = _SHORT_REPR.repr(self.arguments)
        except Exception:  # noqa: BLE001 - any object's repr may fail (a broken __repr__)
            arguments = f"<{type(self.arguments).__name__}>"
        text = f"{name} {arguments}"
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

    def _key(self) -> str:
        return json.dumps({"name": _plain(self.name, canonical=True),
                           "arguments": _plain(self.arguments, canonical=True)}, sort_keys=True, default=repr)

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


def _plain(value: Any, canonical: bool = False, depth: int = 0, path: set[int] | None = None) -> Any:
    """``value`` as data ``json.dumps`` always writes: mappings as dicts with string keys, tuples as lists.

    Integers of more than :data:`MAX_INT_DIGITS` digits become ``"<int 0x...>"``, and lists or mappings nested
    more than :data:`MAX_ARGUMENT_DEPTH` levels deep or inside themselves ``"<nested too deep>"``. With
    ``canonical``, integral floats become ints, so JSON-equal values serialise alike.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_INT_BOUND < value < _INT_BOUND else f"<int {value:#x}>"
    if isinstance(value, float):
        return int(value) if canonical and value.is_integer() else value
    if not _is_container(value):
        return value
    path = set() if path is None else path
    if depth >= MAX_ARGUMENT_DEPTH or id(value) in path:
        return "<nested too deep>"
    path.add(id(value))
    try:
        if isinstance(value, Mapping):
            return {(k if isinstance(k, str) else _brief(k)): _plain(v, canonical, depth + 1, path)
                    for k, v in value.items()}
        return [_plain(v, canonical, depth + 1, path) for v in value]
    finally:
        path.discard(id(value))


def _canonical_json(value: Any) -> str:
    """One string per JSON value (never raises: unknown objects are written with ``repr``)."""
    return json.dumps(_plain(value, canonical=True), sort_keys=True, default=repr)


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr, with integers too large for ``str`` (over Python's digit limit) described."""

    def repr_int(self, value: int, level: int) -> str:
        if not -_INT_BOUND < value < _INT_BOUND:
            return f"<int of more than {MAX_INT_DIGITS} digits>"
        return super().repr_int(value, level)


_SHORT_REPR = _ShortRepr()  # a repr whose cost does not grow with a container's size
_SHORT_REPR.maxlevel, _SHORT_REPR.maxlist, _SHORT_REPR.maxtuple, _SHORT_REPR.maxdict = 3, 8, 8, 8
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = 80


def _brief(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages; never raises."""
    if isinstance(value, int) and not -_INT_BOUND < value < _INT_BOUND:
        return f"an integer of more than {MAX_INT_DIGITS} digits"
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]  # the repr of a long string costs its length: cut first
    try:
        text = _SHORT_REPR.repr(value) if _is_container(value) else repr(value)
    except Exception:  # noqa: BLE001 - any object's repr may fail (too deep, too long, a broken __repr__)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fits(value: Any, max_chars: int) -> bool:
    """Whether ``value`` holds at most ``max_chars`` values and characters of strings (looked at up to that)."""
    stack, budget = [value], max_chars
    while stack:
        item = stack.pop()
        budget -= len(item) + 1 if isinstance(item, str) else 1
        if budget < 0:
            return False
        if _is_container(item):
            if len(item) > budget:
                return False
            stack.extend(item.values() if isinstance(item, Mapping) else item)
            stack.extend(item.keys() if isinstance(item, Mapping) else ())
    return True


def nesting_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests lists, tuples or mappings more than ``max_depth`` levels deep.

    A container holding itself nests without end. Iterative, so no nesting exhausts Python's stack.

    >>> nesting_exceeds({"a": [1, [2]]}, 3), nesting_exceeds({"a": [1, [2]]}, 2)
    (False, True)
    """
    stack, deepest = [(value, 1)], {}  # deepest: id -> deepest level a container was expanded at
    while stack:
        item, level = stack.pop()
        if level > max_depth:
            return True
        if deepest.get(id(item), 0) >= level:  # shared containers are expanded again only when deeper
            continue
        deepest[id(item)] = level
        for child in item.values() if isinstance(item, Mapping) else item:
            if _is_container(child):
                stack.append((child, level + 1))
    return False


def _is_container(value: Any) -> bool:
    """Whether ``value`` is a list, tuple or mapping (fast paths skip the slow ``Mapping`` check)."""
    if isinstance(value, (dict, list, tuple)):
        return True
    return not isinstance(value, (str, int, float)) and isinstance(value, Mapping)


def validate_json(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Validate ``value`` against the JSON-schema subset tool schemas use; return error messages (empty if valid).

    Supported keywords: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
    ``additionalProperties`` (bool or schema), ``items``, ``minItems``, ``maxItems``, ``uniqueItems``,
    ``minLength``, ``maxLength``, ``minimum``, ``maximum``. Values nested more than
    :data:`MAX_ARGUMENT_DEPTH` levels deep and non-finite floats (NaN and Infinity are not JSON) are invalid.
    A hand-written subset rather than ``jsonschema``: it runs on every env step (about 10x faster) and keeps
    the core free of extra dependencies; the tests check it against ``jsonschema`` on random values.
    """
    where = path or "arguments"
    errors: list[str] = []
    if not path and _is_container(value) and nesting_exceeds(value, MAX_ARGUMENT_DEPTH):
        return [f"{where} must not nest lists or objects more than {MAX_ARGUMENT_DEPTH} levels deep"]
    types = schema.get("type")
    if types is not None:
        type_names = [types] if isinstance(types, str) else list(types)
        if not any(_is_json_type(value, t) for t in type_names):
            return [f"{where} must be of type {' or '.join(type_names)}, got {_json_type_name(value)}"]
    if "enum" in schema and not any(_json_equal(value, option) for option in schema["enum"]):
        errors.append(f"{where} must be one of {list(schema['enum'])}, got {_brief(value)}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        errors.append(f"{where} must equal {schema['const']!r}, got {_brief(value)}")
    if isinstance(value, str):
        errors += _validate_length(value, schema, where, "characters")
    elif isinstance(value, float) and not math.isfinite(value):  # NaN and Infinity are not JSON numbers
        errors.append(f"{where} must be a finite number, got {value}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where} must be >= {schema['minimum']}, got {_brief(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where} must be <= {schema['maximum']}, got {_brief(value)}")
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
    if "maxItems" in schema and len(value) > schema["maxItems"]:  # past the bound, the items are not looked at
        return errors + [f"{where} must have at most {schema['maxItems']} items, got {len(value)}"]
    if schema.get("uniqueItems") and len({_canonical_json(v) for v in value}) != len(value):
        errors.append(f"{where} must not contain duplicate items")
    if "items" in schema:
        for i, item in enumerate(value):
            if len(errors) > MAX_VALIDATION_ERRORS:  # one past the cap: enough to say more exist
                break
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
        if len(errors) > MAX_VALIDATION_ERRORS:
            break
        if not isinstance(key, str):
            errors.append(f"argument names must be strings, got {_brief(key)}")
        elif key in properties:
            errors += validate_json(item, properties[key], prefix + key)
        elif extra is False:
            errors.append(f"unexpected argument {_brief(prefix + key)} (allowed: {sorted(properties)})")
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
            hint = self._hint(call.name)
            return [f"unknown tool {_brief(call.name)}; available tools: {list(self.tools)}{hint}"]
        if not isinstance(call.arguments, Mapping):
            return [f"{call.name}: arguments must be an object, got {_json_type_name(call.arguments)}"]
        errors = validate_json(call.arguments, tool.parameters)
        listed = [f"{call.name}: {message}" for message in errors[:MAX_VALIDATION_ERRORS]]
        if len(errors) > MAX_VALIDATION_ERRORS:
            listed.append(f"{call.name}: further errors not listed")
        return listed

    def _hint(self, name: Any) -> str:
        """A "did you mean" for a name that differs from a tool's by case or Unicode compatibility form."""
        if not isinstance(name, str) or len(name) > 256:
            return ""
        folded = unicodedata.normalize("NFKC", name).casefold()
        matches = [tool for tool in self.tools if tool.casefold() == folded]
        return f" (did you mean {matches[0]!r}?)" if matches else ""

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


def invalid_call_text(errors: Sequence[str]) -> str:
    """The observation a tool env answers an invalid call with (the reasons, and what to do instead).

    >>> invalid_call_text(["unknown tool 'dial'"])
    "Error: invalid tool call. unknown tool 'dial'. Call one of the available tools."
    """
    return "Error: invalid tool call. " + "; ".join(errors) + ". Call one of the available tools."
