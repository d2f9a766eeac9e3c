"""The warm starts shipped in the package: each folder is what its settings' key names, loads, and holds no
machine path."""

import json

import pytest
import torch

from worldgym.agents.grpo.presets import grpo_presets
from worldgym.agents.llm.pretrained import named_model_available
from worldgym.agents.llm.warm_start import PACKAGED_WARM_STARTS, WarmStartConfig, load_or_train_warm_start

SHIPPED = sorted(path for path in PACKAGED_WARM_STARTS.iterdir() if path.is_dir())


def _config(folder) -> WarmStartConfig:
    saved = json.loads((folder / "warm_start.json").read_text())["config"]
    return WarmStartConfig(**saved | {"difficulties": tuple(saved["difficulties"])})


def test_every_csr_preset_warm_start_is_shipped():
    assert {preset.warm_start.key() for preset in grpo_presets("CSRPhone-v1").values()} <= {path.name for path in SHIPPED}


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda path: path.name)
def test_a_shipped_folder_holds_the_warm_start_its_name_keys(folder):
    assert _config(folder).key() == folder.name
    adapter = folder / "adapter_config.json"
    if adapter.is_file():  # the base model by name, not this machine's path
        assert json.loads(adapter.read_text())["base_model_name_or_path"] == _config(folder).model


@pytest.mark.skipif(not named_model_available("smollm2-135m"), reason="SmolLM2 not installed (make smollm2)")
def test_the_shipped_smollm2_adapter_loads_as_float32(tmp_path):
    ws = load_or_train_warm_start(grpo_presets("CSRPhone-v1")["smollm2-135m"].warm_start, cache_dir=tmp_path)
    assert ws.path.parent == PACKAGED_WARM_STARTS
    lora = {name: p for name, p in ws.model.named_parameters() if "lora_" in name}
    assert lora and all(p.dtype == torch.float32 and p.requires_grad for p in lora.values())
    assert any(p.abs().sum() > 0 for name, p in lora.items() if "lora_B" in name)  # trained, not a fresh init
