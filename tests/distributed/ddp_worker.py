"""What each rank of ``test_ddp_learner.py`` runs (a module of its own: spawned processes import it by name),
and the trainer and batch that the single-process reference builds the same way."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.grpo.trainer import TrainBatch
from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.rollout import Episode
from worldgym.agents.llm.scoring import score_tokens
from worldgym.distributed import DDPLearner
from worldgym.envs.math_qa import MathQAEnv

# (finetune, loss_aggregation, kl_coef): LoRA with DAPO's token mean and Dr.GRPO's constant normaliser, full
# fine-tuning with GRPO's sequence mean and a KL term
CASES = [("lora", "token_mean", 0.0), ("lora", "dr_grpo", 0.0), ("full", "seq_mean", 0.05)]
ROWS, MINIBATCH, PROMPT = 8, 4, 5
TRAINED = [2**k for k in range(ROWS)]  # 1..128 tokens: no two disjoint sets of rows train as many tokens
WORLD_SIZE = 2


def make_trainer(tokenizer: PreTrainedTokenizerBase, finetune: str, aggregation: str, kl_coef: float,
                 output_dir: str, device: str = "cpu") -> GRPOTrainer:
    config = GRPOConfig(
        device=device, finetune=finetune, loss_aggregation=aggregation, kl_coef=kl_coef, entropy_coef=0.01,
        minibatch_size=MINIBATCH, ppo_epochs=1, prompts_per_step=ROWS // 2, group_size=2, learning_rate=1e-2,
        eval_every=0, progress=False, output_dir=output_dir,
    )
    env = lambda: MathQAEnv(num_problems=4)  # unused: the batch is given
    trainer = GRPOTrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer,
                          make_env=env, make_eval_env=env)
    # SGD, so the weights keep the gradients' float agreement: AdamW's first steps, g / (|g| + eps), scale the
    # rounding of near-zero gradients by up to 1 / eps (1e-5 apart after two steps); the learner steps
    # whatever optimizer the trainer has
    trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=config.learning_rate)
    return trainer


@torch.no_grad()
def make_batch(trainer: GRPOTrainer) -> TrainBatch:
    """Rows of ``PROMPT`` + ``TRAINED[i]`` tokens; old log-probs near the policy's, so few tokens clip."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([PROMPT + n for n in TRAINED])
    width = int(lengths.max())
    columns = torch.arange(width)
    attention_mask = (columns < lengths[:, None]).long()
    input_ids = torch.randint(10, len(trainer.tokenizer), (ROWS, width), generator=generator)
    input_ids = input_ids.masked_fill(attention_mask == 0, trainer.tokenizer.pad_token_id)
    targets = columns[1:]  # action_mask[:, j] marks token j + 1
    action_mask = ((targets >= PROMPT) & (targets < lengths[:, None])).float()
    scored = score_tokens(trainer.policy, input_ids, attention_mask, action_mask, trainer.config.temperature)
    noise = 0.1 * torch.randn(action_mask.shape, generator=generator)
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "action_mask": action_mask,
        "old_logprobs": (scored.logprobs.cpu() + noise) * action_mask,
        "rewards": torch.zeros(ROWS),
        "group_ids": torch.arange(ROWS) // 2,
        "allowed": [{} for _ in range(ROWS)],
    }
    return TrainBatch(batch, torch.randn(ROWS, generator=generator), torch.zeros(ROWS))


def result(trainer: GRPOTrainer, metrics: dict[str, float]) -> dict:
    """The trainable tensors and their last gradients after the update, and its metrics."""
    return {
        "weights": {name: p.detach().cpu().clone() for name, p in trainer.trainable.items()},
        "grads": {name: p.grad.detach().cpu().clone() for name, p in trainer.trainable.items()},
        "metrics": metrics,
    }


def run_rank(rank: int, port: int, tokenizer_dir: str, out_dir: str, backend: str = "gloo") -> None:
    """One rank: every case's update through a :class:`DDPLearner`; rank 0 saves the results. With
    ``backend="nccl"``, rank ``r`` trains on ``cuda:r``."""
    torch.set_num_threads(1)
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE,
                            timeout=timedelta(seconds=60))
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        results = {}
        for finetune, aggregation, kl_coef in CASES:
            trainer = make_trainer(tokenizer, finetune, aggregation, kl_coef, f"{out_dir}/rank{rank}", device)
            metrics = DDPLearner(trainer).update(make_batch(trainer))
            results[finetune, aggregation] = result(trainer, metrics)
        if rank == 0:
            torch.save(results, Path(out_dir) / "ddp.pt")
    finally:
        dist.destroy_process_group()


def token_parity(episode: Episode) -> float:
    """A reward that differs within groups of a random tiny model, so updates are not zero."""
    return float(sum(t for t, sampled in zip(episode.token_ids, episode.action_mask) if sampled) % 2)


LOOP_STEPS = 2


def loop_trainer(output_dir: str, learner: str) -> GRPOTrainer:
    """A GRPO run on MathQA-v0 (tiny model, LoRA, dynamic sampling) whose learner is ``learner``; SGD for the
    reason given in :func:`make_trainer`."""
    config = GRPOConfig(prompts_per_step=2, group_size=2, max_new_tokens=8, minibatch_size=4, learning_rate=1e-2,
                        dynamic_sampling=True, max_resample_rounds=1, num_steps=LOOP_STEPS, eval_every=0,
                        progress=False, output_dir=output_dir, learner=learner)
    trainer = GRPOTrainer(config, reward_fn=token_parity)
    trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=config.learning_rate)
    return trainer


def run_loop_rank(rank: int, port: int, out_dir: str) -> None:
    """One rank of a ``learner="ddp"`` training run, joined the way torchrun does it (environment variables);
    rank 0 saves the weights and every step's metrics."""
    import os

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        trainer = loop_trainer(f"{out_dir}/run", "ddp")
        history = trainer.train()
        if rank == 0:
            weights = {name: p.detach().clone() for name, p in trainer.trainable.items()}
            torch.save({"weights": weights, "history": history}, Path(out_dir) / "loop.pt")
        else:
            assert not trainer.is_main and history and not (Path(out_dir) / "run" / "checkpoint-last").exists()
    finally:
        dist.destroy_process_group()
