"""Run settings from named presets, a YAML/JSON file and command-line flags, through one parser (tyro).

Every ``examples/train_<agent>.py`` describes its run as a dataclass (the agent's config plus what the script
does around it) and names a few presets of it; :func:`parse_run` then reads, in this order:

1. a preset, chosen by the first argument (``python examples/train_grpo.py csr-tiny ...``; the first preset
   when none is given);
2. ``--config FILE.yaml`` (or ``.json``): any subset of the fields, nested as in the dataclass, plus an
   optional ``preset:`` key; or ``--resume RUN_DIR``: the run directory's recorded ``config.json``;
3. flags for any field, e.g. ``--grpo.num-steps 20`` (``--help`` lists every field with its help and choices).

The script records what it ran with :func:`save_run_config` in its run directory, so ``--resume`` and the
benchmarks read it back with :func:`load_run_config`.

>>> from dataclasses import dataclass
>>> @dataclass
... class Run:
...     steps: int = 10
...     name: str = "a"
>>> parse_run({"short": ("Short run.", Run(steps=2))}, args=["--name", "b"]).run
Run(steps=2, name='b')
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import tyro

__all__ = ["CONFIG_FILE", "ParsedRun", "config_from_dict", "load_run_config", "parse_run", "read_config_file",
           "save_run_config"]

T = TypeVar("T")
CONFIG_FILE = "config.json"


@dataclasses.dataclass(frozen=True)
class ParsedRun(Generic[T]):
    """What :func:`parse_run` read: the preset's name, the resolved run settings, and whether to resume."""

    preset: str
    run: T
    resume: bool = False


def parse_run(
    presets: Mapping[str, tuple[str, T]],
    args: Sequence[str] | None = None,
    description: str | None = None,
) -> ParsedRun[T]:
    """Parse a script's command line into one of ``presets`` (name -> (one-line description, dataclass)).

    Raises ``ValueError`` (a config file's unknown field, an unknown preset) or ``FileNotFoundError``; tyro
    exits with its own message on a malformed flag.
    """
    if not presets:
        raise ValueError("parse_run needs at least one preset")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path, default=None)
    pre.add_argument("--resume", type=Path, default=None)
    known, rest = pre.parse_known_args(args)
    if known.config is not None and known.resume is not None:
        raise ValueError("give --config FILE or --resume RUN_DIR, not both (a resumed run keeps its config)")
    file = known.resume / CONFIG_FILE if known.resume is not None else known.config
    if file is None:
        help_text = _file_options_help(description)
        if rest[:1] in (["-h"], ["--help"]) and len(presets) > 1:  # the overview: one subcommand per preset
            tyro.extras.overridable_config_cli(presets, args=rest, description=help_text)
        name = rest[0] if rest and rest[0] in presets else next(iter(presets))
        if rest and not rest[0].startswith("-") and rest[0] not in presets:
            raise ValueError(f"unknown preset {rest[0]!r}: use one of {list(presets)}")
        flags = rest[1:] if rest and rest[0] == name else rest
        return ParsedRun(name, _cli_for(presets, name, flags, help_text))
    name, base = _from_file(file, presets)
    if rest and rest[0] in presets:
        raise ValueError(f"{file} chooses the preset ({name!r}); drop {rest[0]!r} from the command line")
    parsed = tyro.cli(type(base), default=base, args=rest, description=_file_options_help(description))
    return ParsedRun(name, parsed, resume=known.resume is not None)


def _from_file(file: Path, presets: Mapping[str, tuple[str, T]]) -> tuple[str, T]:
    """The preset a settings file names (the first when it names none) with the file's fields applied."""
    data = read_config_file(file)
    name = data.pop("preset", next(iter(presets)))
    if name not in presets:
        raise ValueError(f"{file}: preset {name!r} is unknown: use one of {list(presets)}")
    return name, config_from_dict(presets[name][1], data, source=str(file))


def _cli_for(presets: Mapping[str, tuple[str, T]], name: str, rest: Sequence[str], description: str) -> T:
    summary, default = presets[name]
    return tyro.cli(type(default), default=default, args=list(rest), prog=f"{Path(sys.argv[0]).name} {name}",
                    description=f"{summary}\n\n{description}")


def _file_options_help(description: str | None) -> str:
    extra = ("Settings come from a preset (the first argument; default: the first listed), then --config FILE.yaml|json (any fields, "
             "nested as below, plus 'preset:') or --resume RUN_DIR (its recorded config.json), then these flags.")
    return f"{description}\n\n{extra}" if description else extra


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML (``.yaml``/``.yml``) or JSON (``.json``) mapping of settings."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    elif path.suffix == ".json":
        data = json.loads(text)
    else:
        raise ValueError(f"config file {path}: use a .yaml, .yml or .json file")
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of settings, got {type(data).__name__}")
    return data


def config_from_dict(base: T, data: Mapping[str, Any], source: str = "config") -> T:
    """``base`` (a dataclass instance) with the fields in ``data`` replaced, nested dataclasses recursively;
    validation runs again (``__post_init__``). Unknown fields raise ``ValueError`` naming them and ``source``.

    >>> from worldgym.agents.grpo import GRPOConfig
    >>> config_from_dict(GRPOConfig(), {"num_steps": 3, "lora_target_modules": ["q_proj"]}).lora_target_modules
    ('q_proj',)
    """
    if not dataclasses.is_dataclass(base) or isinstance(base, type):
        raise TypeError(f"config_from_dict needs a dataclass instance, got {type(base).__name__}")
    fields = {f.name for f in dataclasses.fields(base) if f.init}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"{source}: unknown field(s) {unknown} for {type(base).__name__}; "
                         f"valid fields: {sorted(fields)}")
    updates: dict[str, Any] = {}
    for key, value in data.items():
        current = getattr(base, key)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            updates[key] = config_from_dict(current, value, f"{source}: {key}")
        elif current is None and isinstance(value, Mapping) and _dataclass_type(base, key) is not None:
            updates[key] = config_from_dict(_dataclass_type(base, key)(), value, f"{source}: {key}")
        elif isinstance(current, tuple) and isinstance(value, list):
            updates[key] = _as_tuple(value)
        else:
            updates[key] = value
    return dataclasses.replace(base, **updates)


def _as_tuple(value: list[Any]) -> tuple[Any, ...]:
    return tuple(_as_tuple(v) if isinstance(v, list) else v for v in value)


def _dataclass_type(base: Any, name: str) -> type | None:
    """The dataclass type a ``X | None`` field holds, for a file that fills a field whose default is None."""
    import typing

    hints = typing.get_type_hints(type(base))
    for option in typing.get_args(hints[name]) or (hints[name],):
        if dataclasses.is_dataclass(option):
            return option
    return None


def save_run_config(run_dir: str | Path, preset: str, run: Any) -> Path:
    """Write ``run_dir/config.json``: the preset's name and every resolved setting, readable by ``--config``,
    ``--resume`` and :func:`load_run_config`."""
    path = Path(run_dir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"preset": preset, **dataclasses.asdict(run)}, indent=1, default=str) + "\n")
    return path


def load_run_config(run_dir: str | Path, presets: Mapping[str, tuple[str, T]]) -> ParsedRun[T]:
    """The settings a run directory recorded with :func:`save_run_config` (rebuilt on its preset)."""
    name, run = _from_file(Path(run_dir) / CONFIG_FILE, presets)
    return ParsedRun(name, run, resume=True)
