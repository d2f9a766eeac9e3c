"""Strict checks of integer actions and boolean masks: exactly what a space holds, or a typed error.

Gymnasium's ``MultiDiscrete.contains`` admits float arrays whose values lie in range (``[1.5] * 5`` passes),
so envs that index with their actions check them here instead. What is accepted (the lossless casts):

* integer actions: Python ints, numpy integer scalars, numpy arrays of any integer dtype (signed or unsigned,
  any width), CPU tensors and (nested) lists or tuples of those; read as ``int64``;
* boolean masks: numpy ``bool`` arrays and lists or tuples of Python or numpy bools.

Anything else raises ``TypeError``: floats (even ``1.0``), bools where an integer is expected (a flag is not
an index: ``True``, ``np.True_``, a bool array, or a bool inside a list such as ``[True, 1]``, which numpy would
read as ``[1, 1]``), integers where a mask is expected, strings, ``None`` and other objects. A wrong shape or a value
out of range raises ``ValueError``. Messages name the expected dtype, shape and range. The checks never
modify their input, so an env that checks before it changes anything is unchanged by a rejected call.

>>> integer_action([2, 0], "actions", (2,), 3).tolist()
[2, 0]
>>> integer_action([1.5, 0], "actions", (2,), 3)
Traceback (most recent call last):
    ...
TypeError: actions must be integers (dtype int64; ...) of shape (2,) in [0, 3), got dtype float64
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["bool_mask", "integer_action"]


def integer_action(value: Any, name: str, shape: tuple[int, ...], high: int | np.ndarray) -> np.ndarray:
    """``value`` as an ``int64`` array of ``shape`` with every entry in ``[0, high)``, or a typed error.

    Args:
        value: the action as given.
        name: how error messages name it (e.g. ``"action['digits']"``).
        shape: the expected shape (``()`` for a ``Discrete`` action).
        high: the exclusive upper bound: a number, or an array broadcastable to ``shape`` (``nvec``).
    """
    high_text = str(high) if np.ndim(high) == 0 else str(np.asarray(high).tolist())
    expected = (f"{name} must be integers (dtype int64; any integer dtype is accepted) of shape {shape} in "
                f"[0, {high_text})")
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise TypeError(f"{expected}, got {type(value).__name__} {_brief(value)}")
    flag = _first_bool(value) if isinstance(value, (list, tuple)) else None
    if flag is not None:
        raise TypeError(f"{expected}, got {type(flag).__name__} {flag!r} inside {_brief(value)}")
    array = _as_array(value, expected)
    if array.dtype == object and array.size and all(type(x) is int for x in array.flat):
        raise ValueError(f"{expected}, got integers too large for int64")
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{expected}, got dtype {array.dtype}")
    if array.shape != shape:
        raise ValueError(f"{expected}, got shape {array.shape}")
    outside = (array < 0) | (array >= high)
    if outside.any():
        raise ValueError(f"{expected}, got {_brief(array[outside].tolist())} outside the range")
    return array.astype(np.int64)


def bool_mask(value: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as a ``bool`` array of ``shape``, or a typed error (integers 0/1 are not a mask)."""
    expected = f"{name} must be booleans (dtype bool) of shape {shape}"
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{expected}, got {type(value).__name__} {_brief(value)}")
    array = _as_array(value, expected)
    if array.dtype != np.bool_:
        raise TypeError(f"{expected}, got dtype {array.dtype}")
    if array.shape != shape:
        raise ValueError(f"{expected}, got shape {array.shape}")
    return array.copy()


def _first_bool(items: list[Any] | tuple[Any, ...]) -> bool | np.bool_ | None:
    """The first ``bool`` or ``np.bool_`` in (nested) lists and tuples, which ``np.asarray`` reads as 0/1."""
    pending, seen = [items], {id(items)}
    while pending:
        for item in pending.pop():
            if isinstance(item, (bool, np.bool_)):
                return item
            if isinstance(item, (list, tuple)) and id(item) not in seen:  # a list may hold itself
                seen.add(id(item))
                pending.append(item)
    return None


def _as_array(value: Any, expected: str) -> np.ndarray:
    """``np.asarray(value)``, its failures as typed errors that say what was expected."""
    try:
        return np.asarray(value)
    except ValueError as error:  # ragged nesting
        got = f"a {type(value).__name__} that is not a regular array"
        raise ValueError(f"{expected}, got {got} ({error})") from None
    except Exception as error:  # noqa: BLE001 - objects numpy cannot read (a CUDA tensor, a broken __array__)
        raise TypeError(f"{expected}, got a {type(value).__name__} numpy cannot read ({error})") from None


def _brief(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
