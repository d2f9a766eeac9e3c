"""Ray, imported on use: the one place that says how to install it."""

from __future__ import annotations

from typing import Any

__all__ = ["require_ray"]


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as error:  # pragma: no cover - the dist extra is installed in CI
        raise ImportError("runtime='ray' needs Ray: pip install 'worldgym[dist]'") from error
    return ray
