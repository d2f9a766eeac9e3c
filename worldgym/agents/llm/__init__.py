"""Shared LLM stack: tokenizers, models, generation engines, rollouts, losses, SFT, checkpoints and cartridges."""

from worldgym.agents.llm.cartridge import Cartridge, ModelFingerprint, kv_bytes_per_token
from worldgym.agents.llm.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from worldgym.agents.llm.engines import Generation, GenerationEngine, HFEngine, SamplingParams
from worldgym.agents.llm.envs import is_tool_env, make_text_env
from worldgym.agents.llm.loading import build_or_load_chat_model, tiny_chat_model
from worldgym.agents.llm.models import build_tiny_model, load_model, load_tokenizer, save_model_and_tokenizer
from worldgym.agents.llm.pretrained import ChatModel, load_chat_model
from worldgym.agents.llm.rollout import Episode, RolloutCollector, collate_episodes, encode_chat
from worldgym.agents.llm.sft import Chat, SFTConfig, collect_expert_chats, sft_train
from worldgym.agents.llm.tokenizer import (
    CHAT_TEMPLATE,
    COMPACT_TOOLS_CHAT_TEMPLATE,
    env_text_corpus,
    train_chat_tokenizer,
)
from worldgym.errors import CartridgeError

__all__ = [
    "CHAT_TEMPLATE",
    "COMPACT_TOOLS_CHAT_TEMPLATE",
    "Cartridge",
    "CartridgeError",
    "Chat",
    "ChatModel",
    "CheckpointError",
    "Episode",
    "Generation",
    "GenerationEngine",
    "HFEngine",
    "ModelFingerprint",
    "RolloutCollector",
    "SFTConfig",
    "SamplingParams",
    "build_or_load_chat_model",
    "build_tiny_model",
    "collate_episodes",
    "collect_expert_chats",
    "encode_chat",
    "env_text_corpus",
    "is_tool_env",
    "kv_bytes_per_token",
    "load_chat_model",
    "load_checkpoint",
    "load_model",
    "load_tokenizer",
    "make_text_env",
    "save_checkpoint",
    "save_model_and_tokenizer",
    "sft_train",
    "tiny_chat_model",
    "train_chat_tokenizer",
]
