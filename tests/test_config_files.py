"""Settings files (``--config`` and ``--resume``'s config.json): read with bounds, every value checked against
its field's type before a run starts, and refused with a ConfigError naming the file, the field, the value and
what is expected."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

import pytest

from worldgym.cli import load_run_config, parse_run, save_run_config
from worldgym.config_file import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, read_config_file
from worldgym.config_types import config_from_dict
from worldgym.errors import ConfigError, WorldgymError

EXAMPLES = ["train_grpo", "train_dual_lora", "train_cartridge", "train_dreamer", "train_ztoken_ppo"]


@pytest.fixture(scope="module")
def grpo_example():
    from tests.conftest import _load_example

    return _load_example("train_grpo")


# (YAML under "preset: csr-tiny", what the error names): each was accepted, or refused from deep inside
REFUSED = [
    ("grpo:\n  seed: abc\n", "grpo.seed='abc' is invalid: expected an integer"),
    ("grpo:\n  seed: true\n", "grpo.seed=True is invalid: expected an integer"),
    ("grpo:\n  env_kwargs: x\n", "grpo.env_kwargs='x' is invalid: expected a mapping of a string -> any value"),
    ("difficulty: hard\n", "difficulty='hard' is invalid: expected an integer or null"),
    ("difficulty: 9\n", "in CSRRun: difficulty=9 is invalid: use one of [None, 1, 2, 3, 4, 5]"),
    ("shaping: lots\n", "shaping='lots' is invalid: expected one of ['none', 'progress']"),
    ("engine_batch_size: -3\n", "in CSRRun: engine_batch_size=-3 is invalid: use an integer >= 1"),
    ("grpo:\n  lora_target_modules: 5\n", "grpo.lora_target_modules=5 is invalid: expected a list of strings"),
    ("grpo:\n  lora_target_modules: [q_proj, 3]\n", "grpo.lora_target_modules[1]=3 is invalid: expected a string"),
    ("grpo:\n  output_dir: [1, 2]\n", "grpo.output_dir=[1, 2] is invalid: expected a string"),
    ("grpo: [1, 2]\n", "grpo=[1, 2] is invalid: expected a mapping of GRPOConfig fields"),
    ("grpo:\n  env_kwargs: {1: 2}\n", "grpo.env_kwargs: key=1 is invalid: expected a string"),
    ("grpo:\n  num_steps: 1.5\n", "grpo.num_steps=1.5 is invalid: expected an integer"),
    ("grpo:\n  group_size: 1\n", "in grpo (GRPOConfig): group_size=1 is invalid"),
    ("warm_start:\n  model: 3\n", "warm_start.model=3 is invalid: expected a string"),
    ("7: 2\n", "unknown field(s) [7] for CSRRun"),
]


@pytest.mark.parametrize(("settings", "named"), REFUSED)
def test_bad_values_are_refused_before_the_run_folder_is_written(grpo_example, tmp_path, settings, named):
    out = tmp_path / "run"
    file = tmp_path / "run.yaml"
    file.write_text(f"preset: csr-tiny\n{settings}")
    with pytest.raises(ConfigError) as raised:
        grpo_example.main(["--config", str(file), "--grpo.output-dir", str(out)])
    assert str(raised.value).startswith(f"{file}: ") and named in str(raised.value)
    assert not out.exists()


def test_good_values_are_read_with_lossless_conversions(grpo_example, tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text("preset: csr-tiny\ndifficulty: 2\ngrpo:\n  learning_rate: 1\n  lora_target_modules: [q_proj]\n"
                    "  env_kwargs: {split: train, difficulty: [1, 2]}\n  eps_low: 0.1\n")
    run = parse_run(grpo_example.PRESETS, ["--config", str(file)]).run
    assert run.grpo.learning_rate == 1.0 and type(run.grpo.learning_rate) is float
    assert run.grpo.lora_target_modules == ("q_proj",) and run.grpo.env_kwargs["difficulty"] == [1, 2]


HOSTILE = {
    "alias bomb in a list field": "preset: csr-tiny\ngrpo:\n  lora_target_modules:\n  - &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"  - &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
              f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)),
    "deep nesting": "grpo:\n  env_kwargs:\n    x: " + "[" * 5000 + "]" * 5000 + "\n",
    "too many values": "grpo:\n  env_kwargs:\n    x: [" + ",".join(["1"] * (MAX_CONFIG_NODES + 1)) + "]\n",
    "huge integer": "grpo:\n  seed: " + "9" * 20_000 + "\n",
    "too large": "grpo:\n  env_kwargs:\n    x: '" + "a" * MAX_CONFIG_BYTES + "'\n",
    "not a mapping": "- 1\n- 2\n",
    "not YAML": "grpo: [1, 2\n",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_files_fail_fast_naming_the_file(grpo_example, tmp_path, name):
    file = tmp_path / "run.yaml"
    file.write_text(HOSTILE[name])
    with pytest.raises(ConfigError, match=f"config file {file}"):  # refused before anything is built
        parse_run(grpo_example.PRESETS, ["--config", str(file)])


def test_json_files_and_their_limits(tmp_path):
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"a": {"b": 1}}))
    assert read_config_file(file) == {"a": {"b": 1}}
    nested: Any = 1
    for _ in range(MAX_CONFIG_DEPTH):
        nested = [nested]
    file.write_text(json.dumps({"x": nested}))
    with pytest.raises(ConfigError, match=f"nests more than {MAX_CONFIG_DEPTH} levels"):
        read_config_file(file)
    file.write_text("[" * 50_000)
    with pytest.raises(ConfigError, match="nests more than"):
        read_config_file(file)
    file.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_config_file(file)


def test_a_tampered_resume_config_is_refused_naming_the_field(grpo_example, tmp_path):
    out = tmp_path / "run"
    save_run_config(out, "csr-tiny", grpo_example.PRESETS["csr-tiny"][1])
    recorded = json.loads((out / "config.json").read_text())
    recorded["grpo"]["eval_env_kwargs"] = "validation"
    (out / "config.json").write_text(json.dumps(recorded))
    with pytest.raises(ConfigError, match=r"config.json: grpo.eval_env_kwargs='validation' is invalid"):
        parse_run(grpo_example.PRESETS, ["--resume", str(out)])


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_presets_recorded_config_reads_back_unchanged(tmp_path, name):
    from tests.conftest import _load_example

    example = _load_example(name)
    for preset, (_, run) in example.PRESETS.items():
        save_run_config(tmp_path / preset, preset, run)
        assert load_run_config(tmp_path / preset, example.PRESETS).run == run


@dataclasses.dataclass
class _Inner:
    rate: float = 0.5
    pair: tuple[int, float] = (1, 2.0)


@dataclasses.dataclass
class _Outer:
    inner: _Inner | None = None
    mode: Literal["a", "b"] = "a"
    schedule: tuple[tuple[int, float], ...] = ()
    counts: dict[str, int | str] = dataclasses.field(default_factory=dict)


def test_the_type_check_covers_literals_tuples_dicts_and_optional_dataclasses():
    outer = config_from_dict(_Outer(), {"inner": {"rate": 1}, "schedule": [[1, 2], [3, 0.5]],
                                        "counts": {"a": 1, "b": "x"}}, source="f.yaml")
    assert outer == _Outer(_Inner(1.0), "a", ((1, 2.0), (3, 0.5)), {"a": 1, "b": "x"})
    refused = [({"inner": {"pair": [1]}}, "inner.pair=[1] is invalid: expected a list of 2 items"),
               ({"inner": {"rate": "fast"}}, "inner.rate='fast' is invalid: expected a number"),
               ({"inner": {"rate": 1e400}}, None), ({"mode": "A"}, "mode='A' is invalid: expected one of ['a', 'b']"),
               ({"schedule": [[1, "x"]]}, "schedule[0][1]='x' is invalid: expected a number"),
               ({"counts": {"a": 1.5}}, "counts.a=1.5 is invalid: expected an integer or a string"),
               ({"inner": {"depth": 1}}, "f.yaml: inner: unknown field(s) ['depth'] for _Inner")]
    for data, named in refused:
        if named is None:  # inf is a float: allowed by the type (a config's own checks bound it)
            assert config_from_dict(_Outer(), data).inner.rate == float("inf")
            continue
        with pytest.raises(ConfigError) as raised:
            config_from_dict(_Outer(), data, source="f.yaml")
        assert named in str(raised.value) and isinstance(raised.value, (ValueError, WorldgymError))


def test_strings_must_be_unicode_text(tmp_path):
    file = tmp_path / "run.json"
    file.write_text('{"mode": "a", "counts": {"k": "x\\ud800"}}')
    with pytest.raises(ConfigError, match=r"counts.k='x\\ud800' is invalid: expected Unicode text"):
        config_from_dict(_Outer(), read_config_file(file), source=str(file))
