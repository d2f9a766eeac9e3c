"""Validation helpers shared by every config and env constructor: a :class:`~worldgym.errors.ConfigError`
names the setting, the value received and the fix, in one style (``name=value is invalid: fix``).

:func:`renamed_fields` keeps a renamed config field's old name working, with a ``DeprecationWarning``, for one
release."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from worldgym.errors import ConfigError

__all__ = ["apply_renamed_fields", "check_choice", "check_device", "check_field", "check_positive_int",
           "check_range", "renamed_fields", "renamed_fields_of"]

C = TypeVar("C", bound=type)
_RENAMED = "__renamed_fields__"


def check_field(condition: bool, name: str, value: Any, fix: str) -> None:
    """Raise :class:`ConfigError` (a ``ValueError``) naming the field, the value received and how to fix it
    when ``condition`` is false.

    >>> check_field(3 >= 1, "epochs", 3, "use a positive integer")
    >>> check_field(0 >= 1, "epochs", 0, "use a positive integer")
    Traceback (most recent call last):
    worldgym.errors.ConfigError: epochs=0 is invalid: use a positive integer
    """
    if not condition:
        raise ConfigError(f"{name}={value!r} is invalid: {fix}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``allowed`` (for ``Literal[...]`` fields)."""
    options = list(allowed)
    check_field(value in options, name, value, f"use one of {options}")


def check_positive_int(name: str, value: Any) -> None:
    """Raise :class:`ConfigError` unless ``value`` is an ``int`` >= 1 (``bool`` and integral floats are rejected).

    >>> check_positive_int("seq_len", 8.5)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: seq_len=8.5 is invalid: use an integer >= 1
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    check_field(ok, name, value, "use an integer >= 1")


def check_range(
    name: str, value: Any, low: float | None, high: float | None, low_open: bool = False, high_open: bool = False
) -> None:
    """Raise :class:`ConfigError` unless ``low <= value <= high`` (``<`` on an open end; ``None``: unbounded).

    >>> check_range("top_p", 1.0, 0, 1, low_open=True)
    >>> check_range("eps_low", 0.0, 0, 1, low_open=True, high_open=True)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: eps_low=0.0 is invalid: use a number in (0, 1)
    >>> check_range("kl_coef", -1, 0, None)
    Traceback (most recent call last):
    worldgym.errors.ConfigError: kl_coef=-1 is invalid: use a number >= 0
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if high is None:
        fix = f"use a number {'>' if low_open else '>='} {low}"
    elif low is None:
        fix = f"use a number {'<' if high_open else '<='} {high}"
    else:
        fix = f"use a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    check_field(ok, name, value, fix)


def check_device(name: str, value: Any) -> None:
    """Raise :class:`ConfigError` unless ``value`` names a torch device the trainers run on: cpu, cuda or cuda:N.

    >>> check_device("device", "cuda:1")
    >>> check_device("device", "tpu")
    Traceback (most recent call last):
    worldgym.errors.ConfigError: device='tpu' is invalid: use 'cpu', 'cuda' or 'cuda:N'
    """
    ok = isinstance(value, str) and (value in ("cpu", "cuda") or value.startswith("cuda:"))
    check_field(ok, name, value, "use 'cpu', 'cuda' or 'cuda:N'")


def renamed_fields(**renames: str) -> Callable[[C], C]:
    """Class decorator (above ``@dataclass``) for a config whose fields were renamed, ``old="new"``: for one
    release each old name still works, with a ``DeprecationWarning`` naming the new field, as a keyword argument
    (:func:`apply_renamed_fields`), in settings files, ``--resume`` folders and checkpoints' ``config.json``
    (:func:`worldgym.config_types.config_from_dict`), as a command-line flag (:func:`worldgym.cli.parse_run`)
    and as an attribute. The old names are not fields: ``dataclasses.fields``, ``asdict`` and ``--help`` show
    the new ones only.

    >>> import dataclasses, warnings
    >>> @renamed_fields(lr="learning_rate")
    ... @dataclasses.dataclass
    ... class Run:
    ...     learning_rate: float = 0.1
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     run = Run(lr=0.5)
    >>> run, str(caught[0].message)
    (Run(learning_rate=0.5), 'Run.lr is deprecated: use Run.learning_rate')
    """

    def decorate(cls: C) -> C:
        fields = getattr(cls, "__dataclass_fields__", None)
        if fields is None:
            raise TypeError(f"renamed_fields decorates a dataclass (put it above @dataclass), got {cls.__name__}")
        missing = sorted(new for new in renames.values() if new not in fields)
        if missing:
            raise TypeError(f"renamed_fields: {cls.__name__} has no field(s) {missing}")
        setattr(cls, _RENAMED, {**getattr(cls, _RENAMED, {}), **renames})
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **apply_renamed_fields(type(self), kwargs))

        cls.__init__ = __init__
        for old, new in renames.items():
            setattr(cls, old, _old_name_property(cls.__name__, old, new))
        return cls

    return decorate


def renamed_fields_of(cls: type) -> dict[str, str]:
    """``{old: new}`` of the fields :func:`renamed_fields` renamed in ``cls`` (empty for other classes)."""
    return dict(getattr(cls, _RENAMED, {}))


def apply_renamed_fields(cls: type, data: Mapping[str, Any], source: str | None = None,
                         stacklevel: int = 3) -> dict[str, Any]:
    """``data`` (field -> value for ``cls``) with every old field name of ``cls`` replaced by its new one, each
    with a ``DeprecationWarning`` (naming ``source``, e.g. a settings file, when given).

    Raises:
        ConfigError: ``data`` gives both a field's old and new name.
    """
    out = dict(data)
    for old, new in renamed_fields_of(cls).items():
        if old not in out:
            continue
        where = f"{source}: " if source else ""
        if new in out:
            raise ConfigError(f"{where}{cls.__name__} got both {old!r} and {new!r}: {old!r} is the deprecated "
                              f"name of {new!r}, drop it")
        warnings.warn(f"{where}{cls.__name__}.{old} is deprecated: use {cls.__name__}.{new}", DeprecationWarning,
                      stacklevel=stacklevel)
        out[new] = out.pop(old)
    return out


def _old_name_property(owner: str, old: str, new: str) -> property:
    """Reads (and, on a mutable config, writes) ``new`` through the deprecated attribute ``old``."""

    def warn() -> None:
        warnings.warn(f"{owner}.{old} is deprecated: use {owner}.{new}", DeprecationWarning, stacklevel=3)

    def get(self: Any) -> Any:
        warn()
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        warn()
        setattr(self, new, value)  # a frozen dataclass raises FrozenInstanceError, as for its fields

    return property(get, set_, doc=f"Deprecated name of :attr:`{new}`.")
