"""What each env offers for training agents on it: its scripted expert and its named presets, by env id.

An env registers these next to itself, in its package's ``__init__``; agents look them up by env id and never
name an env. A lookup of an id with nothing registered yet first imports the module of the id's Gymnasium entry
point (and so its package), the way ``gym.make`` would.

- **Experts** (:func:`register_expert`, :func:`make_expert`): a factory of the policy a warm start imitates. A
  ``"text"`` expert is called as ``expert(env, observation, info) -> str`` on a text env and may return an
  :class:`Untrained` action; a ``"vector"`` expert acts on a batched env, as the agent built for that env reads
  it. The factory takes the options the expert declares (e.g. ``seed``, ``mistake_rate``), by keyword.
- **Presets** (:func:`register_presets`, :func:`presets`): named plain settings, grouped by what reads them
  (e.g. ``"warm_start"``, ``"trainer"``, ``"engine"``), each group a dict of an agent config's fields.

>>> from worldgym.env_training import expert_spec, presets
>>> expert_spec("CSRPhone-v1").difficulties
(1, 2, 3)
>>> sorted(presets("CSRPhone-v1"))
['smollm2-135m', 'tiny']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import gymnasium as gym

from worldgym.errors import ConfigError

__all__ = [
    "ExpertSpec", "Untrained", "current_env_id", "default_preset", "expert_spec", "has_expert", "make_expert",
    "preset", "presets", "register_expert", "register_presets", "warm_start_env_id",
]

ExpertKind = Literal["text", "vector"]
Settings = Mapping[str, Mapping[str, Any]]  # group ("warm_start", "trainer", ...) -> an agent config's fields


class Untrained(str):
    """A text expert's action that is executed but not learnt from, e.g. a mistake injected so that the chat
    shows the expert's recovery from it (DART-style noise): its assistant message gets ``"train": False``."""


@dataclass(frozen=True)
class ExpertSpec:
    """An env's registered expert.

    Args:
        env_id: the env it plays.
        make: the factory, called with the options by keyword.
        options: the keyword options ``make`` takes (any other is refused by :meth:`build`).
        kind: ``"text"`` (one env, text actions) or ``"vector"`` (a batched env, the env's own actions).
        difficulties: the difficulty levels a warm start collects demonstrations at by default (``()``: an env
            without levels).
        warm_start_id: the env id warm-start cache keys name (an older id of the env, so warm starts cached or
            shipped before its version was bumped keep their keys); empty: ``env_id``.
    """

    env_id: str
    make: Callable[..., Any]
    options: tuple[str, ...] = ()
    kind: ExpertKind = "text"
    difficulties: tuple[int, ...] = ()
    warm_start_id: str = ""

    def build(self, **options: Any) -> Any:
        """A new expert made with ``options``.

        Raises:
            ConfigError: an option the expert does not take.
        """
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ConfigError(f"expert options {unknown} are invalid: {self.env_id}'s expert takes "
                              f"{list(self.options)}")
        return self.make(**options)


@dataclass(frozen=True)
class _Presets:
    settings: Mapping[str, Settings]
    default: str
    models: Mapping[str, str] = field(default_factory=dict)  # preset name -> the model it is for


_EXPERTS: dict[str, ExpertSpec] = {}
_PRESETS: dict[str, _Presets] = {}


def register_expert(env_id: str, make: Callable[..., Any], *, options: tuple[str, ...] = (),
                    kind: ExpertKind = "text", difficulties: tuple[int, ...] = (), warm_start_id: str = "") -> None:
    """Register ``env_id``'s expert (a later registration of the id replaces it); see :class:`ExpertSpec`."""
    _EXPERTS[env_id] = ExpertSpec(env_id, make, tuple(options), kind, tuple(difficulties), warm_start_id)


def register_presets(env_id: str, settings: Mapping[str, Settings], *, default: str | None = None) -> None:
    """Register ``env_id``'s named presets: name -> group -> fields (a later registration replaces them).

    ``default``: the preset for a model none of them names (:func:`default_preset`; the first when None). A
    preset is for the model its ``"warm_start"`` group's ``"model"`` names, when it has one.
    """
    if not settings:
        raise ConfigError(f"settings={settings!r} is invalid: register at least one preset for {env_id}")
    default = next(iter(settings)) if default is None else default
    if default not in settings:
        raise ConfigError(f"default={default!r} is invalid: use one of {list(settings)}")
    models = {name: str(groups["warm_start"]["model"]) for name, groups in settings.items()
              if "model" in groups.get("warm_start", {})}
    frozen = {name: MappingProxyType({group: MappingProxyType(dict(fields)) for group, fields in groups.items()})
              for name, groups in settings.items()}
    _PRESETS[env_id] = _Presets(MappingProxyType(frozen), default, MappingProxyType(models))


def has_expert(env_id: str) -> bool:
    """Whether ``env_id`` has a registered expert."""
    _load(env_id)
    return env_id in _EXPERTS


def expert_spec(env_id: str) -> ExpertSpec:
    """``env_id``'s registered expert.

    Raises:
        ConfigError: no expert is registered for ``env_id`` (the message names the ids that have one).
    """
    return _registered(_EXPERTS, env_id, "no expert is registered for it; register one with "
                       "worldgym.env_training.register_expert")


def make_expert(env_id: str, **options: Any) -> Any:
    """A new expert of ``env_id`` made with ``options`` (:meth:`ExpertSpec.build`)."""
    return expert_spec(env_id).build(**options)


def presets(env_id: str) -> Mapping[str, Settings]:
    """``env_id``'s presets: name -> group -> fields (read-only).

    Raises:
        ConfigError: no presets are registered for ``env_id`` (the message names the ids that have some).
    """
    return _presets_of(env_id).settings


def preset(env_id: str, name: str) -> Settings:
    """``env_id``'s preset ``name``: group -> fields.

    Raises:
        ConfigError: ``env_id`` has no presets, or none called ``name`` (the message names them).
    """
    settings = presets(env_id)
    if name not in settings:
        raise ConfigError(f"preset={name!r} is invalid: {env_id} has presets {list(settings)}")
    return settings[name]


def default_preset(env_id: str, model: str) -> str:
    """The name of ``env_id``'s preset for ``model``: the one whose warm start is of ``model``, else the env's
    default preset (the one registered for models no preset names)."""
    registered = _presets_of(env_id)
    return next((name for name, of in registered.models.items() if of == model), registered.default)


def warm_start_env_id(env_id: str) -> str:
    """The env id that warm-start cache keys of ``env_id`` name (:attr:`ExpertSpec.warm_start_id`)."""
    _load(env_id)
    spec = _EXPERTS.get(env_id)
    return (spec.warm_start_id or env_id) if spec is not None else env_id


def current_env_id(warm_start_id: str) -> str:
    """The registered env whose warm-start keys name ``warm_start_id`` (itself when none does); the other
    versions of its env (``<name>-v<N>``) are looked up first."""
    name = warm_start_id.rsplit("-v", 1)[0]
    for env_id in list(gym.registry):
        if env_id.rsplit("-v", 1)[0] == name:
            _load(env_id)
    return next((spec.env_id for spec in _EXPERTS.values() if spec.warm_start_id == warm_start_id), warm_start_id)


def _presets_of(env_id: str) -> _Presets:
    return _registered(_PRESETS, env_id, "no presets are registered for it; register them with "
                       "worldgym.env_training.register_presets")


def _registered(table: dict[str, Any], env_id: str, missing: str) -> Any:
    """``table[env_id]`` once the env's package is imported, else a ConfigError: ``missing``, and the ids the
    table holds (every worldgym env package imported first, so that all of them are named)."""
    _load(env_id)
    if env_id not in table:
        _load_worldgym_envs()
        raise ConfigError(f"env_id={env_id!r} is invalid: {missing} or use one of {sorted(table)}")
    return table[env_id]


def _load(env_id: str) -> None:
    """Import the module of ``env_id``'s Gymnasium entry point (its package registers what it offers) unless
    something is registered for the id already."""
    if env_id in _EXPERTS or env_id in _PRESETS or env_id not in gym.registry:
        return
    entry_point = gym.registry[env_id].entry_point
    if isinstance(entry_point, str):
        importlib.import_module(entry_point.split(":")[0])


def _load_worldgym_envs() -> None:
    """Import the package of every env under ``worldgym.envs`` (for an error message naming all that is
    registered); one whose optional dependencies are missing is skipped."""
    for env_id, spec in list(gym.registry.items()):
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("worldgym.envs."):
            try:
                _load(env_id)
            except ImportError:
                continue
