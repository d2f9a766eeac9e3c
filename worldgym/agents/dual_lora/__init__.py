"""Dual-LoRA world-model agent: a policy adapter trained with DAPO and a world-model adapter that predicts the
CSR's reply to each phone call, on one frozen base, ``L = L_policy + λ·L_wm``."""

from worldgym.agents.dual_lora.config import ADAPTER_TARGETS, WM_SPECIAL_TOKENS, DualLoRAConfig
from worldgym.agents.dual_lora.objective import WorldModelObjective
from worldgym.agents.dual_lora.trainer import DualLoRATrainer, attach_adapters, wm_success_correlation

__all__ = [
    "ADAPTER_TARGETS",
    "WM_SPECIAL_TOKENS",
    "DualLoRAConfig",
    "DualLoRATrainer",
    "WorldModelObjective",
    "attach_adapters",
    "wm_success_correlation",
]
