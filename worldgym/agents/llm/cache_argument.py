"""The KV cache's name in transformers' model and ``generate`` calls, for every version the package supports.

transformers 5.24 renamed the ``past_key_values`` argument and output field to ``cache``: the old name still
works but warns on every call, and the deprecation says it goes in 5.40. 5.23 (the floor in ``pyproject.toml``)
knows only the old name. These helpers speak whichever name the installed version has::

    hidden = decoder(input_ids=ids, use_cache=True, **cache_argument(prefix_cache))
    cache = returned_cache(hidden)
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from transformers.cache_utils import Cache
from transformers.modeling_outputs import BaseModelOutputWithPast

CACHE_ARGUMENT: str = (
    "cache" if "cache" in {field.name for field in fields(BaseModelOutputWithPast)} else "past_key_values"
)
"""``"cache"`` from transformers 5.24 on, ``"past_key_values"`` before."""


def cache_argument(cache: Cache | None) -> dict[str, Cache | None]:
    """The keyword argument that passes ``cache`` to a model's ``forward`` or to ``generate``."""
    return {CACHE_ARGUMENT: cache}


def returned_cache(output: Any) -> Cache:
    """The cache a model call or ``generate`` (with ``return_dict_in_generate``) returned."""
    return getattr(output, CACHE_ARGUMENT)
