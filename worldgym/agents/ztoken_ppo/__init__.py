"""Z-token PPO agent: a causal LM with digit and value heads, a supervised warm start, and masked-action PPO.

Typical run: ``build_policy`` -> ``warm_start`` -> ``save_checkpoint`` -> ``ZTokenPPOTrainer(config)`` with
``config.init_checkpoint`` set to that checkpoint -> ``train()`` (``load()`` resumes a run);
``evaluate_policy`` scores any policy on the env's held-out split. The LM is built by the shared LLM stack
(:mod:`worldgym.agents.llm.models`) and the vector envs by :func:`worldgym.agents.llm.rollout.make_vector_env`.
"""

from worldgym.agents.ztoken_ppo.checkpoint import CheckpointError, load_policy, save_checkpoint
from worldgym.agents.ztoken_ppo.config import ZTokenModelConfig, ZTokenPPOConfig, ZTokenWarmStartConfig
from worldgym.agents.ztoken_ppo.encoding import NativeEncoder, TokenizerEncoder, add_ztoken_tokens
from worldgym.agents.ztoken_ppo.evaluate import evaluate_policy
from worldgym.agents.ztoken_ppo.factory import build_policy
from worldgym.agents.ztoken_ppo.model import ZTokenPolicy, masked_token_log_probs
from worldgym.agents.ztoken_ppo.rollout import ZTokenEpisode, ztoken_vector_env
from worldgym.agents.ztoken_ppo.trainer import ZTokenPPOTrainer
from worldgym.agents.ztoken_ppo.warm_start import warm_start

__all__ = [
    "CheckpointError",
    "NativeEncoder",
    "TokenizerEncoder",
    "ZTokenEpisode",
    "ZTokenModelConfig",
    "ZTokenPPOConfig",
    "ZTokenPPOTrainer",
    "ZTokenPolicy",
    "ZTokenWarmStartConfig",
    "add_ztoken_tokens",
    "build_policy",
    "evaluate_policy",
    "load_policy",
    "masked_token_log_probs",
    "save_checkpoint",
    "warm_start",
    "ztoken_vector_env",
]
