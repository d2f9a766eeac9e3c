"""Read a settings file (YAML or JSON) with bounds, so a hostile or broken file fails fast with a ConfigError.

A run's settings are a few kilobytes nested a few levels deep. A file is refused, naming it, when it is larger
than :data:`MAX_CONFIG_BYTES`, nests more than :data:`MAX_CONFIG_DEPTH` levels, holds more than
:data:`MAX_CONFIG_NODES` values, uses a YAML alias (``*name``: the "billion laughs" expansion), is not valid
YAML/JSON (the line is named), holds an integer too long to convert, or is not a mapping at the top level.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worldgym.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "MAX_CONFIG_NODES", "read_config_file"]

MAX_CONFIG_BYTES = 64 * 1024  # the examples' recorded config.json files are 1-3 KB
MAX_CONFIG_DEPTH = 16  # a run's settings nest at most ~5 levels (run -> agent -> env_kwargs -> list)
MAX_CONFIG_NODES = 10_000  # mappings, lists and scalars together


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping of settings in a YAML (``.yaml``/``.yml``) or JSON (``.json``) file.

    Raises:
        FileNotFoundError: the file does not exist.
        ConfigError: (a ``ValueError``) the file breaks one of the module's bounds, is not valid YAML/JSON or
            UTF-8, or is not a mapping; the message names the file (and the line where there is one).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    if path.suffix not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"config file {path}: use a .yaml, .yml or .json file")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} has {size} bytes, more than the {MAX_CONFIG_BYTES} a settings "
                          "file may have")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    data = _read_json(text, path) if path.suffix == ".json" else _read_yaml(text, path)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings, got {type(data).__name__}")
    _check_shape(data, path)
    return data


def _read_json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"config file {path}: not valid JSON (line {error.lineno}, column {error.colno}: "
                          f"{error.msg})") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests more than {MAX_CONFIG_DEPTH} levels") from None
    except ValueError as error:  # an integer beyond Python's conversion limit
        raise ConfigError(f"config file {path}: a value cannot be read ({error})") from None


def _read_yaml(text: str, path: Path) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: ~25x faster
    try:
        _check_yaml_events(yaml.parse(text, Loader=loader), path)
        return yaml.load(text, Loader=loader)
    except ConfigError:
        raise
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        reason = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"config file {path}: not valid YAML{where}: {reason}") from None
    except ValueError as error:  # an integer beyond Python's conversion limit
        raise ConfigError(f"config file {path}: a value cannot be read ({error})") from None


def _check_yaml_events(events: Any, path: Path) -> None:
    """Refuse aliases, deep nesting and too many values from the parser's events, before anything is built."""
    import yaml

    depth = nodes = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            raise ConfigError(f"config file {path}, line {line}: YAML aliases (*{event.anchor}) are not allowed "
                              "in settings files; write the value out")
        if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            nodes += 1
            if nodes > MAX_CONFIG_NODES:
                raise ConfigError(f"config file {path} holds more than {MAX_CONFIG_NODES} values")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else "?"
                raise ConfigError(f"config file {path}, line {line}: nested more than {MAX_CONFIG_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_shape(data: Any, path: Path) -> None:
    """Refuse a JSON file's deep nesting or too many values (YAML files were checked while parsing)."""
    pending, nodes = [(data, 1)], 0
    while pending:
        value, depth = pending.pop()
        nodes += 1
        if nodes > MAX_CONFIG_NODES:
            raise ConfigError(f"config file {path} holds more than {MAX_CONFIG_NODES} values")
        if isinstance(value, (dict, list)):
            if depth > MAX_CONFIG_DEPTH:
                raise ConfigError(f"config file {path} nests more than {MAX_CONFIG_DEPTH} levels")
            pending.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
