"""Random settings files against every example's run config, for ``fuzz_envs.py``'s ``config-files`` target.

Each file is YAML (or JSON) written from a preset's own fields with values mutated or replaced by wrong types,
unknown fields, Unicode and lone surrogates, huge integers, or a hostile document (alias bombs, deep nesting,
oversized, not YAML, not a mapping). :func:`load_outcome` passes it to ``parse_run`` as ``--config``: it must
load to a valid config (the preset's class, its checks passed) or be refused with a ``ConfigError`` naming the
file; anything else escaping is an unhandled exception.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from worldgym.cli import parse_run
from worldgym.config_file import MAX_CONFIG_BYTES, MAX_CONFIG_NODES
from worldgym.errors import ConfigError

__all__ = ["EXAMPLES", "ConfigFuzzer", "load_example", "load_outcome"]

EXAMPLES = ("train_grpo", "train_dual_lora", "train_cartridge", "train_dreamer", "train_ztoken_ppo")
_ROOT = Path(__file__).resolve().parents[1]
WRONG_VALUES: tuple[Any, ...] = (None, True, False, 0, -3, 1.5, -0.0, float("nan"), float("inf"), 10**30, "",
                                 "abc", "Janet’s €3 ¾ 中文 🙂", [], [1, "x"], {"a": 1}, {1: 2}, [[[[]]]])


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a module (its ``PRESETS`` are the configs fuzzed)."""
    spec = importlib.util.spec_from_file_location(name, _ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class ConfigFuzzer:
    """Settings documents drawn from a seeded ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def document(self, presets: dict[str, tuple[str, Any]]) -> tuple[str, str]:
        """``(suffix, text)``: a settings file for one of ``presets``."""
        rng = self.rng
        if rng.random() < 0.15:
            return ".yaml", self.hostile()
        name = rng.choice([*presets, *presets, "no-such-preset", 3])
        settings: dict[Any, Any] = self.settings(presets[name][1] if name in presets else presets[next(iter(presets))][1])
        if rng.random() < 0.7:
            settings = {"preset": name, **settings}
        if rng.random() < 0.2:
            return ".json", json.dumps(settings, default=str)
        return ".yaml", yaml.safe_dump(settings, allow_unicode=True, sort_keys=False)

    def settings(self, config: Any, depth: int = 0) -> dict[Any, Any]:
        """A few of ``config``'s fields (nested dataclasses recursively), most with mutated values."""
        rng = self.rng
        fields = [f.name for f in dataclasses.fields(config) if f.init]
        chosen = rng.sample(fields, k=min(len(fields), rng.randrange(1, 5)))
        result: dict[Any, Any] = {}
        for name in chosen:
            current = getattr(config, name)
            if dataclasses.is_dataclass(current) and rng.random() < 0.7 and depth < 3:
                result[name] = self.settings(current, depth + 1)
            else:
                result[name] = self.value(current)
        if rng.random() < 0.05:
            result[rng.choice(["num_stepz", "", 7, "Grpo", "preset"])] = 1
        return result

    def value(self, current: Any) -> Any:
        """A value for a field now holding ``current``: kept, mutated in type, or replaced by a wrong one."""
        rng = self.rng
        kind = rng.randrange(4)
        if kind == 0:
            return _plain(current)
        if kind == 1:
            return rng.choice(WRONG_VALUES)
        if isinstance(current, bool):
            return not current
        if isinstance(current, int):
            return rng.choice([current + rng.randrange(-3, 4), 0, -1, current * 10, 2**63])
        if isinstance(current, float):
            return rng.choice([current * 10, -current, 0.0, 1, float("nan"), 1e308])
        if isinstance(current, str):
            return rng.choice([current.upper(), current + "é", "", " ", "ünïcødé/路径", current[:1]])
        if isinstance(current, (tuple, list)):
            return [self.value(item) for item in current] + ([rng.choice(WRONG_VALUES)] if rng.random() < 0.3 else [])
        if isinstance(current, dict):
            return {**_plain(current), rng.choice(["split", "difficulty", "é", "x"]): rng.choice(WRONG_VALUES)}
        return rng.choice(WRONG_VALUES)

    def hostile(self) -> str:
        """A document that must be refused as a whole, fast."""
        rng, kind = self.rng, self.rng.randrange(8)
        if kind == 0:  # an alias bomb, at the top or inside a list field
            lines = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
            return "\n".join(lines) + "\n" if rng.random() < 0.5 else "grpo:\n  lora_target_modules:\n" + "".join(
                f"  - {line.split(': ', 1)[1]}\n" for line in lines)
        if kind == 1:
            depth = rng.randrange(20, 5000)
            return "grpo:\n  env_kwargs:\n    x: " + "[" * depth + "]" * depth + "\n"
        if kind == 2:
            return "grpo:\n  seed: " + "9" * rng.randrange(5000, 30_000) + "\n"
        if kind == 3:
            return "x: '" + "a" * (MAX_CONFIG_BYTES + rng.randrange(10)) + "'\n"
        if kind == 4:
            return "x: [" + ",".join(["1"] * (MAX_CONFIG_NODES + 1)) + "]\n"
        if kind == 5:
            return rng.choice(["- 1\n- 2\n", "just text\n", "", "null\n", "42\n"])
        if kind == 6:
            return rng.choice(["grpo: [1, 2\n", "a:\n\tb: 1\n", "a: b: c\n", "!!python/object:os.system x\n",
                               '"\\ud800": 1\n', "grpo:\n  model: \"\\ud800\"\n", "? [a]\n: 1\n"])
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(1, 40))).replace("\x00", "")


def load_outcome(file: Path, presets: dict[str, tuple[str, Any]]) -> tuple[str, str]:
    """``("loaded", "")``, ``("refused", message)`` or ``("violation", why)``; other exceptions propagate."""
    try:
        parsed = parse_run(presets, ["--config", str(file)])
    except ConfigError as error:
        named = str(error).startswith((f"{file}", f"config file {file}"))
        return ("refused", str(error)) if named else ("violation", f"refusal names no file: {error}")
    if not isinstance(parsed.run, type(presets[parsed.preset][1])):
        return "violation", f"loaded a {type(parsed.run).__name__}"
    return "loaded", ""


def _plain(value: Any) -> Any:
    """``value`` as plain YAML data (dataclasses as mappings, tuples as lists)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value
