"""Run settings from named presets, a YAML/JSON file and command-line flags, through one parser (tyro).

Every ``examples/train_<agent>.py`` describes its run as a dataclass (the agent's config plus what the script
does around it) and names a few presets of it; :func:`parse_run` then reads, in this order:

1. a preset, chosen by the first argument (``python examples/train_grpo.py csr-tiny ...``; the first preset
   when none is given);
2. ``--config FILE.yaml`` (or ``.json``): any subset of the fields, nested as in the dataclass, plus an
   optional ``preset:`` key; or ``--resume RUN_DIR``: the run directory's recorded ``config.json``. The file
   is read with bounds (:mod:`worldgym.config_file`: size, depth, no YAML aliases) and every value is checked
   against its field's type (:mod:`worldgym.config_types`) before the script writes anything: a bad value
   raises :class:`worldgym.errors.ConfigError` naming the file, the field's path, the value and what is
   expected;
3. flags for any field, e.g. ``--grpo.num-steps 20`` (``--help`` lists every field with its help and choices);
   a renamed field's old flag (:func:`worldgym.config.renamed_fields`) still works, with a
   ``DeprecationWarning``.

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
import typing
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import tyro

from worldgym.config import renamed_fields_of
from worldgym.config_file import read_config_file
from worldgym.config_types import config_from_dict
from worldgym.errors import ConfigError

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

    Raises :class:`worldgym.errors.ConfigError` (a ``ValueError``: a config file that is malformed, too large
    or deep, uses YAML aliases, or holds an unknown field or a value its field's type or the config's checks
    refuse), ``ValueError`` (an unknown preset) or ``FileNotFoundError``; tyro exits with its own message on a
    malformed flag.
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
    parsed = tyro.cli(type(base), default=base, args=_renamed_flags(type(base), rest), description=_file_options_help(description))
    return ParsedRun(name, parsed, resume=known.resume is not None)


def _from_file(file: Path, presets: Mapping[str, tuple[str, T]]) -> tuple[str, T]:
    """The preset a settings file names (the first when it names none) with the file's fields applied."""
    data = read_config_file(file)
    name = data.pop("preset", next(iter(presets)))
    if not isinstance(name, str) or name not in presets:
        raise ConfigError(f"{file}: preset={name!r} is invalid: expected one of {list(presets)}")
    return name, config_from_dict(presets[name][1], data, source=str(file))


def _cli_for(presets: Mapping[str, tuple[str, T]], name: str, rest: Sequence[str], description: str) -> T:
    summary, default = presets[name]
    return tyro.cli(type(default), default=default, args=_renamed_flags(type(default), rest), prog=f"{Path(sys.argv[0]).name} {name}",
                    description=f"{summary}\n\n{description}")


def _renamed_flags(run_type: type, args: Sequence[str]) -> list[str]:
    """``args`` with every old flag of a renamed field (``--dreamer.total-steps``) replaced by its new one
    (``--dreamer.num-steps``), each with a ``DeprecationWarning``."""
    renamed = _old_flags(run_type, "")
    out = []
    for arg in args:
        flag, equals, value = arg.partition("=")
        new = renamed.get(flag.replace("_", "-")) if flag.startswith("--") else None
        if new is not None:
            warnings.warn(f"the flag {flag} is deprecated: use {new}", DeprecationWarning, stacklevel=4)
            arg = new + equals + value
        out.append(arg)
    return out


def _old_flags(cls: type, prefix: str) -> dict[str, str]:
    """``{"--old-flag": "--new-flag"}`` for the renamed fields of dataclass ``cls`` and of the dataclasses
    nested in it (flags spelled with dashes, as tyro writes them)."""
    flags = {f"--{prefix}{old}".replace("_", "-"): f"--{prefix}{new}".replace("_", "-")
             for old, new in renamed_fields_of(cls).items()}
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):  # an annotation this module cannot resolve: no nested renames to find
        return flags
    for field in dataclasses.fields(cls):
        for option in typing.get_args(hints.get(field.name)) or (hints.get(field.name),):
            if dataclasses.is_dataclass(option) and isinstance(option, type):
                flags |= _old_flags(option, f"{prefix}{field.name}.")
    return flags


def _file_options_help(description: str | None) -> str:
    extra = ("Settings come from a preset (the first argument; default: the first listed), then --config FILE.yaml|json (any fields, "
             "nested as below, plus 'preset:') or --resume RUN_DIR (its recorded config.json), then these flags.")
    return f"{description}\n\n{extra}" if description else extra


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
