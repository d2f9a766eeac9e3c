"""The precision a machine gets: "auto" follows the CPU, a forced bf16 on a CPU without it warns once, and no
registered preset or example forces bf16."""

import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from worldgym import env_training, machine, precision
from worldgym.errors import ConfigError
from worldgym.precision import EmulatedBF16Warning, resolve_dtype
from worldgym.registration import ENV_SPECS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cpu(monkeypatch):
    """Fake the CPU probe: ``cpu(native=True|False)``; the once-per-process warning is reset around the test."""
    def fake(native: bool) -> None:
        monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: native)
        monkeypatch.setattr(precision, "cpu_isa", lambda: "AVX512" if native else "AVX2")
        monkeypatch.setattr(precision, "cpu_model", lambda: "Test CPU 9000")

    precision.warn_if_bf16_emulated.cache_clear()
    yield fake
    precision.warn_if_bf16_emulated.cache_clear()


def test_forced_bf16_without_native_support_warns_once_naming_the_cpu_and_still_runs(cpu):
    cpu(native=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dtypes = [resolve_dtype("bfloat16", "cpu") for _ in range(2)]  # a second request: no second warning
    assert dtypes == [torch.bfloat16] * 2
    assert [warning.category for warning in caught] == [EmulatedBF16Warning]
    message = str(caught[0].message)
    assert "Test CPU 9000" in message and "ISA level AVX2" in message and "tens of times slower" in message
    assert resolve_dtype("auto", "cpu") == torch.float32


def test_forced_bf16_with_native_support_and_auto_do_not_warn(cpu):
    cpu(native=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmulatedBF16Warning)
        assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16
        assert resolve_dtype("auto", "cpu") == torch.bfloat16
        assert resolve_dtype("float32", "cpu") == torch.float32


def test_a_trainer_config_forcing_bf16_warns_on_a_cpu_without_it(cpu, tmp_path):
    from worldgym.agents.ztoken_ppo import ZTokenPPOConfig, ZTokenPPOTrainer

    cpu(native=False)
    config = ZTokenPPOConfig(num_steps=1, dtype="bfloat16", output_dir=str(tmp_path), progress=False)
    with pytest.warns(EmulatedBF16Warning):
        trainer = ZTokenPPOTrainer(config)
    assert trainer.dtype == torch.bfloat16


def test_an_onednn_cap_below_bf16_means_no_native_bf16(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    precision.cpu_supports_bf16.cache_clear()
    try:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
        assert not precision.cpu_supports_bf16()
        precision.cpu_supports_bf16.cache_clear()
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
        assert precision.cpu_supports_bf16()
        precision.cpu_supports_bf16.cache_clear()
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
        monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
        assert not precision.cpu_supports_bf16()
    finally:
        precision.cpu_supports_bf16.cache_clear()


def _setting_dtypes(value):
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "dtype":
                yield item
            yield from _setting_dtypes(item)


def test_no_registered_preset_forces_bf16():
    checked = 0
    for env_id in sorted(ENV_SPECS):
        try:
            named = env_training.presets(env_id)
        except ConfigError:  # an env with no presets registered
            named = {}
        for name, settings in named.items():
            for dtype in _setting_dtypes(settings):
                checked += 1
                assert dtype != "bfloat16", f"{env_id} preset {name!r} forces bf16: use 'auto'"
    assert checked > 0  # at least one preset names a dtype


def test_no_example_or_preset_source_forces_bf16():
    pattern = re.compile(r"""dtype["']?\s*[:=]\s*["']bfloat16["']""")
    sources = [*REPO.glob("examples/*.py"), *REPO.glob("worldgym/**/presets.py"), REPO / "Makefile"]
    offenders = [str(path.relative_to(REPO)) for path in sources if pattern.search(path.read_text())]
    assert not offenders


def test_machine_info_names_the_cpu_and_versions():
    info = machine.machine_info()
    assert info["cpu_count"] >= 1 and info["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    assert info["torch"] and isinstance(info["amx_bf16"], bool) and isinstance(info["avx512_bf16"], bool)
    label = machine.machine_label(info)
    assert info["cpu_model"] in label and f"{info['cpu_count']} cores" in label
    assert machine.machine_kind({"amx_bf16": True, "avx512_bf16": True, "cpu_isa": "AVX512"}) == "amx"
    assert machine.machine_kind({"amx_bf16": False, "avx512_bf16": True, "cpu_isa": "AVX512"}) == "avx512-bf16"
    assert machine.machine_kind({"amx_bf16": False, "avx512_bf16": False, "cpu_isa": "AVX2"}) == "avx2"
    assert machine.machine_label(None) == "not recorded"
