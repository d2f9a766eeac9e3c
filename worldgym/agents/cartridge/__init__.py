"""On-policy cartridge distillation: a trainable KV prefix (:class:`worldgym.agents.llm.Cartridge`) learns to
stand in for a patient's documents, taught by the same frozen model with the documents in context."""

from worldgym.agents.cartridge.config import CartridgeDistillConfig, DistillMode
from worldgym.agents.cartridge.losses import KLKind, distillation_loss
from worldgym.agents.cartridge.trainer import CartridgeDistillTrainer, teacher_warm_start_config

__all__ = ["CartridgeDistillConfig", "CartridgeDistillTrainer", "DistillMode", "KLKind", "distillation_loss",
           "teacher_warm_start_config"]
