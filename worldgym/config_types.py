"""Check settings read from a file against a dataclass config's field types, before anything runs.

:func:`config_from_dict` applies a mapping (a YAML/JSON file's settings) to a dataclass instance. Every value is
checked against its field's annotation (``int``, ``float``, ``str``, ``bool``, ``X | None``, ``Literal[...]``,
``tuple[...]``, ``list[...]``, ``dict[K, V]``, ``Any`` and nested dataclasses), then the dataclass validates
itself (``__post_init__``). Any failure is a :class:`worldgym.errors.ConfigError` that names the source, the
field's path, the value and what is expected, e.g. ``run.yaml: grpo.seed='abc' is invalid: expected an
integer``. The only conversions are lossless ones a file cannot express: a list for a tuple field becomes a
tuple, an integer for a float field becomes a float. A field's old name (:func:`worldgym.config.renamed_fields`) is read as
its new one, with a ``DeprecationWarning``.

>>> from dataclasses import dataclass
>>> @dataclass
... class Run:
...     steps: int = 10
...     names: tuple[str, ...] = ()
>>> config_from_dict(Run(), {"steps": 3, "names": ["a"]})
Run(steps=3, names=('a',))
>>> config_from_dict(Run(), {"steps": "many"}, source="run.yaml")
Traceback (most recent call last):
    ...
worldgym.errors.ConfigError: run.yaml: steps='many' is invalid: expected an integer
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from worldgym.config import apply_renamed_fields
from worldgym.errors import ConfigError

__all__ = ["check_value", "config_from_dict", "describe_type"]

T = TypeVar("T")
_REPR = reprlib.Repr()  # values in messages stay short whatever a file holds
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 2, 60, 60, 4, 4
_UNIONS = (typing.Union, types.UnionType)
_SURROGATE = re.compile("[\ud800-\udfff]")  # "\ud800" in a file's string: half of a UTF-16 pair, not text


class _Mismatch(Exception):
    """A value does not fit a type (turned into a ConfigError naming the field by :func:`check_value`)."""

    def __init__(self, path: str, value: Any, expected: str):
        super().__init__(path, value, expected)
        self.path, self.value, self.expected = path, value, expected


def config_from_dict(base: T, data: Any, source: str = "config", path: str = "") -> T:
    """``base`` (a dataclass instance) with the fields in ``data`` replaced, every value checked against its
    field's type (nested dataclasses recursively) and the result validated again (``__post_init__``).

    Raises:
        ConfigError: (a ``ValueError``) naming ``source``, the field's path, the value and what is expected:
            an unknown field, a value of the wrong type, or a value the config's own checks refuse.
    """
    if not dataclasses.is_dataclass(base) or isinstance(base, type):
        raise TypeError(f"config_from_dict needs a dataclass instance, got {type(base).__name__}")
    where = path or type(base).__name__
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: {where} must be a mapping of field -> value for {type(base).__name__}, "
                          f"got {_brief(data)}")
    data = apply_renamed_fields(type(base), data, f"{source}: {path}" if path else source)
    fields = {f.name for f in dataclasses.fields(base) if f.init}
    unknown = [key for key in data if key not in fields]
    if unknown:
        names = "[" + ", ".join(_brief(key) for key in unknown) + "]"
        raise ConfigError(f"{source}: {path + ': ' if path else ''}unknown field(s) {names} for {type(base).__name__}; "
                          f"valid fields: {sorted(fields)}")
    hints = typing.get_type_hints(type(base))
    updates = {}
    for key, value in data.items():
        field_path = f"{path}.{key}" if path else key
        try:
            updates[key] = _field_value(getattr(base, key), value, hints[key], source, field_path)
        except _Mismatch as error:
            raise ConfigError(f"{source}: {error.path}={_brief(error.value)} is invalid: expected "
                              f"{error.expected}") from None
    try:
        return dataclasses.replace(base, **updates)
    except (ValueError, TypeError) as error:  # the config's own validation (__post_init__), ConfigError included
        where = f"{path} ({type(base).__name__})" if path else type(base).__name__
        raise ConfigError(f"{source}: in {where}: {error}") from None


def check_value(value: Any, annotation: Any, path: str) -> Any:
    """``value`` if it fits ``annotation`` (lists become tuples for tuple types, ints floats for ``float``).

    Raises:
        ConfigError: naming ``path``, the value and the expected type.
    """
    try:
        return _check(value, annotation, path)
    except _Mismatch as error:
        raise ConfigError(f"{error.path}={_brief(error.value)} is invalid: expected {error.expected}") from None


def describe_type(annotation: Any) -> str:
    """``annotation`` in words, for error messages (``int | None`` -> ``"an integer or null"``)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return "any value"
    if annotation is type(None) or annotation is None:
        return "null"
    if origin in _UNIONS:
        return " or ".join(describe_type(option) for option in args)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if annotation in _SCALARS:
        return _SCALARS[annotation][1]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_plural(args[0])}"
        return f"a list of {len(args)} items ({', '.join(describe_type(a) for a in args)})"
    if origin in (list, Sequence):
        return f"a list of {_plural(args[0]) if args else 'values'}"
    if origin in (dict, Mapping):
        return f"a mapping of {describe_type(args[0])} -> {describe_type(args[1])}" if args else "a mapping"
    if dataclasses.is_dataclass(annotation):
        return f"a mapping of {annotation.__name__} fields"
    return f"a {getattr(annotation, '__name__', annotation)}"


def _field_value(current: Any, value: Any, annotation: Any, source: str, path: str) -> Any:
    """A field's new value: nested dataclasses are filled field by field from the current one."""
    nested = _dataclass_option(annotation)
    if nested is not None and isinstance(value, Mapping):
        if not isinstance(current, nested):
            try:
                current = nested()
            except TypeError:
                raise ConfigError(f"{source}: {path} is None here and {nested.__name__} has fields without "
                                  "defaults, so it cannot be built from part of its settings") from None
        return config_from_dict(current, value, source, path)
    return _check(value, annotation, path)


def _check(value: Any, annotation: Any, path: str) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return value
    if annotation is type(None) or annotation is None:
        return _require(value is None, value, annotation, path, value)
    if origin in _UNIONS:
        closest = None  # a mismatch inside an option of the value's own type says more than "expected X or Y"
        for option in args:
            try:
                return _check(value, option, path)
            except _Mismatch as error:
                of_its_type = isinstance(typing.get_origin(option) or option, type) and isinstance(
                    value, typing.get_origin(option) or option)
                if closest is None and (of_its_type or error.path != path):
                    closest = error
        raise closest or _Mismatch(path, value, describe_type(annotation))
    if origin is typing.Literal:
        return _require(any(type(value) is type(a) and value == a for a in args), value, annotation, path, value)
    if annotation is str and isinstance(value, str) and _SURROGATE.search(value):
        raise _Mismatch(path, value, "Unicode text (a lone surrogate such as '\\ud800' is half of a UTF-16 pair)")
    if annotation in _SCALARS:
        accepts = _SCALARS[annotation][0]
        ok = accepts(value)
        return _require(ok, value, annotation, path, float(value) if ok and annotation is float else value)
    if origin is tuple:
        return _check_tuple(value, annotation, args, path)
    if origin in (list, Sequence):
        _require(isinstance(value, list), value, annotation, path, None)
        return [_check(item, args[0] if args else Any, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin in (dict, Mapping):
        _require(isinstance(value, Mapping), value, annotation, path, None)
        key_type, value_type = args or (Any, Any)
        return {_check(k, key_type, f"{path}: key"): _check(v, value_type, f"{path}.{k}")
                for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        return _require(isinstance(value, annotation), value, annotation, path, value)
    if isinstance(annotation, type):
        return _require(isinstance(value, annotation), value, annotation, path, value)
    raise TypeError(f"{path}: the config type {annotation!r} cannot be read from a file")


def _check_tuple(value: Any, annotation: Any, args: tuple[Any, ...], path: str) -> tuple[Any, ...]:
    _require(isinstance(value, (list, tuple)), value, annotation, path, None)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_check(item, args[0], f"{path}[{i}]") for i, item in enumerate(value))
    if args and len(value) != len(args):
        raise _Mismatch(path, value, describe_type(annotation))
    return tuple(_check(item, kind, f"{path}[{i}]") for i, (item, kind) in enumerate(zip(value, args)))


def _require(ok: bool, value: Any, annotation: Any, path: str, result: Any) -> Any:
    if not ok:
        raise _Mismatch(path, value, describe_type(annotation))
    return result


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:  # an int beyond float's range
        return False
    return True


_SCALARS: dict[Any, tuple[typing.Callable[[Any], bool], str]] = {
    bool: (lambda v: type(v) is bool, "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (_is_number, "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _plural(annotation: Any) -> str:
    text = describe_type(annotation)
    return {"an integer": "integers", "a number": "numbers", "a string": "strings"}.get(text, f"({text})")


def _dataclass_option(annotation: Any) -> type | None:
    """The dataclass type ``annotation`` is or holds (``X | None``), if any."""
    for option in typing.get_args(annotation) or (annotation,):
        if dataclasses.is_dataclass(option) and isinstance(option, type):
            return option
    return None


def _brief(value: Any) -> str:
    return _REPR.repr(value)
