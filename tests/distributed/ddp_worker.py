"""What each rank of ``test_ddp_learner.py`` runs (a module of its own: spawned processes import it by name),
and the trainer and batch that the single-process reference builds the same way."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.grpo.auxiliary import SINGLE_PROCESS, LossShard
from worldgym.agents.grpo.echo import EchoTargets
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
LEARNER_SETTINGS = {"fsdp": {"share_prompt_prefix": False}}  # config settings a learner needs


@contextmanager
def group_member(rank: int, out_dir: str) -> Iterator[None]:
    """Run the body as ``rank`` of the process group already joined, then leave it so that no rank tears its
    connections down under a peer: a barrier once every rank's work is done, the group destroyed, and rank 0
    (the host of the group's TCP store) exits only after every other rank has left (a marker file each).
    A rank that succeeded then ends its process at once (``os._exit``), without the interpreter's teardown:
    objects still holding the destroyed group (a DDP reducer) would be freed there, and Gloo's threads freeing
    their tensors while the interpreter is torn down abort it. Each of the two (ranks leaving out of step, then
    that teardown) has killed rank 1 in CI with SIGABRT ("terminate called without an active exception")."""
    succeeded = False
    try:
        yield
        dist.barrier()
        succeeded = True
    finally:
        dist.destroy_process_group()
    left = Path(out_dir) / f".rank{rank}-left"
    left.touch()
    deadline = time.monotonic() + 60
    while rank == 0 and succeeded and time.monotonic() < deadline:
        if all((Path(out_dir) / f".rank{other}-left").exists() for other in range(WORLD_SIZE)):
            break
        time.sleep(0.05)
    if succeeded:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def make_trainer(tokenizer: PreTrainedTokenizerBase, finetune: str, aggregation: str, kl_coef: float,
                 output_dir: str, device: str = "cpu", **overrides) -> GRPOTrainer:
    """The update tests' trainer (config ``overrides`` on top, e.g. a learner or microbatch size)."""
    settings = {"minibatch_size": MINIBATCH, **overrides}
    config = GRPOConfig(
        device=device, finetune=finetune, loss_aggregation=aggregation, kl_coef=kl_coef, entropy_coef=0.01,
        ppo_epochs=1, prompts_per_step=ROWS // 2, group_size=2, learning_rate=1e-2, eval_every=0,
        progress=False, output_dir=output_dir, **settings,
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
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "action_mask": action_mask,
        "rewards": torch.zeros(ROWS),
        "group_ids": torch.arange(ROWS) // 2,
        "allowed": [{} for _ in range(ROWS)],
    }
    return near_policy(trainer, TrainBatch(batch, torch.zeros(ROWS), torch.zeros(ROWS)), generator)


@torch.no_grad()
def near_policy(trainer: GRPOTrainer, prepared: TrainBatch, generator: torch.Generator) -> TrainBatch:
    """``prepared`` with old log-probs near the policy's (so few tokens clip) and random advantages (so the
    policy loss has gradients)."""
    batch = prepared.batch
    with trainer.parallel.full_weights() if trainer.parallel is not None else nullcontext():  # FSDP: whole
        scored = score_tokens(trainer.policy, batch["input_ids"], batch["attention_mask"],
                              batch["action_mask"], trainer.config.temperature)
    noise = 0.1 * torch.randn(batch["action_mask"].shape, generator=generator)
    batch["old_logprobs"] = (scored.logprobs.cpu() + noise) * batch["action_mask"]
    return TrainBatch(batch, torch.randn(len(prepared.advantages), generator=generator), prepared.rewards)


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
    with group_member(rank, out_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        results = {}
        for finetune, aggregation, kl_coef in CASES:
            trainer = make_trainer(tokenizer, finetune, aggregation, kl_coef, f"{out_dir}/rank{rank}", device)
            metrics = DDPLearner(trainer).update(make_batch(trainer))
            results[finetune, aggregation] = result(trainer, metrics)
        if rank == 0:
            torch.save(results, Path(out_dir) / "ddp.pt")


# ---------------------------------------------------------------- microbatches under a data-parallel learner
# case -> (finetune, loss_aggregation, kl_coef, minibatch_size, microbatch_size). The 8 rows make minibatches
# of 4 (shares of 2 rows) in the first case; of 5 and 3 (shares of 3 + 2, then 2 + 1 rows) in the second; of
# 3, 3 and 2 (2 + 1, 2 + 1, 1 + 1) in the third: unequal shares, which FSDP pads to as many microbatches
MICRO_CASES = {
    "lora-token_mean": ("lora", "token_mean", 0.0, 4, 1),
    "lora-token_mean-unequal": ("lora", "token_mean", 0.0, 5, 2),
    "full-seq_mean-unequal": ("full", "seq_mean", 0.05, 3, 1),
}


def micro_trainer(tokenizer: PreTrainedTokenizerBase, case: str, output_dir: str, learner: str,
                  microbatches: bool, **overrides) -> GRPOTrainer:
    """``MICRO_CASES[case]``'s trainer with ``learner`` (and config ``overrides``), split into its
    microbatches or not."""
    finetune, aggregation, kl_coef, minibatch, micro = MICRO_CASES[case]
    return make_trainer(tokenizer, finetune, aggregation, kl_coef, output_dir, learner=learner,
                        minibatch_size=minibatch, microbatch_size=micro if microbatches else 0, **overrides)


def record_forward_rows(trainer: GRPOTrainer) -> list[int]:
    """A list that gets the number of rows of every forward the policy runs with gradients (one per
    microbatch)."""
    rows: list[int] = []
    embeddings = trainer.policy.get_input_embeddings()
    embeddings.register_forward_pre_hook(
        lambda module, args: rows.append(len(args[0])) if torch.is_grad_enabled() else None)
    return rows


def run_microbatch_rank(rank: int, port: int, tokenizer_dir: str, out_dir: str, learner: str) -> None:
    """One rank: every ``MICRO_CASES`` update with ``learner`` in microbatches; rank 0 saves the whole
    weights, gradients and metrics, and every rank's forward sizes."""
    torchrun_environment(rank, port)
    with group_member(rank, out_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        results = {}
        for case in MICRO_CASES:
            trainer = micro_trainer(tokenizer, case, f"{out_dir}/{case}{rank}", learner, microbatches=True,
                                    **LEARNER_SETTINGS.get(learner, {}))
            batch = make_batch(trainer)
            forward_rows = record_forward_rows(trainer)
            metrics = trainer.parallel.update(batch)
            every_rank: list[list[int]] = [[] for _ in range(WORLD_SIZE)]
            dist.all_gather_object(every_rank, forward_rows)
            results[case] = {"weights": whole_weights(trainer), "grads": whole_grads(trainer),
                             "metrics": metrics, "forward_rows": every_rank}
        if rank == 0:
            torch.save(results, Path(out_dir) / "micro.pt")


def token_parity(episode: Episode) -> float:
    """A reward that differs within groups of a random tiny model, so updates are not zero."""
    return float(sum(t for t, sampled in zip(episode.token_ids, episode.action_mask) if sampled) % 2)


LOOP_STEPS = 2


def loop_trainer(output_dir: str, learner: str, sgd: bool = True, **overrides) -> GRPOTrainer:
    """A GRPO run on MathQA-v1 (tiny model, LoRA, dynamic sampling) whose learner is ``learner``, with config
    ``overrides``; SGD for the reason given in :func:`make_trainer` (else the trainer's AdamW)."""
    settings = {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8, "minibatch_size": 4,
                "learning_rate": 1e-2, "dynamic_sampling": True, "max_resample_rounds": 1,
                "num_steps": LOOP_STEPS, "eval_every": 0, "progress": False}
    config = GRPOConfig(**{**settings, **overrides}, output_dir=output_dir, learner=learner)
    trainer = GRPOTrainer(config, reward_fn=token_parity)
    if sgd:
        trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=config.learning_rate)
    return trainer


def torchrun_environment(rank: int, port: int) -> None:
    """One torch thread, and the environment variables torchrun gives rank ``rank`` (the trainer joins)."""
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def run_loop_rank(rank: int, port: int, out_dir: str) -> None:
    """One rank of a ``learner="ddp"`` training run, joined the way torchrun does it (environment variables);
    rank 0 saves the weights and every step's metrics."""
    torchrun_environment(rank, port)
    with group_member(rank, out_dir):
        trainer = loop_trainer(f"{out_dir}/run", "ddp")
        history = trainer.train()
        if rank == 0:
            weights = {name: p.detach().clone() for name, p in trainer.trainable.items()}
            torch.save({"weights": weights, "history": history}, Path(out_dir) / "loop.pt")
        else:
            assert not trainer.is_main and history and not (Path(out_dir) / "run" / "checkpoint-last").exists()


# ---------------------------------------------------------------- the dual-LoRA world model under DDP
# transfer mode -> world-model settings: "separate" trains on 3 of a minibatch's ~8 phone calls plus as
# many replayed ones, and skips confident calls (the threshold splits this tiny model's calls), with the policy
# loss in microbatches of one row; "shared" trains on 1 call, so one rank scores none
DUAL_CASES = {
    "separate": {"transfer": "separate", "wm_max_calls": 3, "wm_replay_fraction": 0.5,
                 "wm_confidence_skip": 0.00126, "microbatch_size": 1},
    "shared": {"transfer": "shared", "wm_max_calls": 1, "wm_replay_capacity": 0},
}
DUAL_STEP_TURNS = (3, 3, 1)  # max turns of each step's episodes: search then phone calls; the last, no call


def _dual_lora_conftest():
    """tests/agents/dual_lora/conftest.py (its phoning engine and CSR env), loaded by path."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "agents" / "dual_lora" / "conftest.py"
    spec = importlib.util.spec_from_file_location("dual_lora_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def csr_tokenizer() -> PreTrainedTokenizerBase:
    """The dual-LoRA tests' CSR tokenizer (with the world model's markers)."""
    from worldgym.agents.dual_lora import WM_SPECIAL_TOKENS
    from worldgym.agents.llm.tokenizer import env_text_corpus, train_chat_tokenizer

    conftest = _dual_lora_conftest()
    corpus = env_text_corpus(conftest.make_csr_env, num_resets=50)
    corpus += [conftest.PHONE_CALL, conftest.SEARCH] * 10
    return train_chat_tokenizer(corpus, vocab_size=800, extra_special_tokens=WM_SPECIAL_TOKENS)


def dual_lora_run(tokenizer: PreTrainedTokenizerBase, case: str, output_dir: str, learner: str,
                  **overrides) -> dict:
    """Train a dual-LoRA trainer (``DUAL_CASES[case]``, no dropout, SGD, config ``overrides``) for one update
    per entry of ``DUAL_STEP_TURNS`` on scripted episodes; returns its trainable tensors and each update's
    metrics."""
    from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
    from worldgym.agents.llm.engines import SamplingParams
    from worldgym.agents.llm.rollout import RolloutCollector

    conftest = _dual_lora_conftest()
    config = DualLoRAConfig(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1},
                            prompts_per_step=4, group_size=2, minibatch_size=MINIBATCH, ppo_epochs=1,
                            lora_dropout=0.0, learning_rate=1e-2, eval_every=0, progress=False,
                            output_dir=output_dir, learner=learner, **DUAL_CASES[case], **overrides)
    engine = conftest.PhoningEngine(tokenizer)
    trainer = DualLoRATrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer,
                              make_env=conftest.make_csr_env, make_engine=lambda policy: engine)
    trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=config.learning_rate)
    generator = torch.Generator().manual_seed(0)
    history = []
    for turns in DUAL_STEP_TURNS:
        collector = RolloutCollector(engine, tokenizer, conftest.make_csr_env, max_turns=turns)
        episodes = collector.collect(range(config.prompts_per_step), config.group_size, SamplingParams())
        prepared = near_policy(trainer, trainer.prepare(episodes), generator)
        learner = trainer.parallel or trainer
        history.append(learner.update(prepared))
        trainer.step += 1
    return {"weights": whole_weights(trainer), "history": history}


def whole_weights(trainer: GRPOTrainer) -> dict[str, torch.Tensor]:
    """The trainable tensors, whole (gathered from an FSDP learner's shards: every rank calls it)."""
    if trainer.parallel is None:
        return {name: p.detach().cpu().clone() for name, p in trainer.trainable.items()}
    return dict(trainer.parallel.full_trainable())


def whole_grads(trainer: GRPOTrainer) -> dict[str, torch.Tensor]:
    """The trainable tensors' last (clipped) gradients, whole (an FSDP learner's are gathered: every rank
    calls it)."""
    grads = {name: p.grad for name, p in trainer.trainable.items()}
    return {name: (g.full_tensor() if isinstance(g, DTensor) else g).detach().cpu().clone()
            for name, g in grads.items()}


def run_dual_lora_rank(rank: int, port: int, tokenizer_dir: str, out_dir: str, learner: str = "ddp") -> None:
    """One rank of every ``DUAL_CASES`` run with ``learner``; rank 0 saves the results."""
    torchrun_environment(rank, port)
    with group_member(rank, out_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        results = {case: dual_lora_run(tokenizer, case, f"{out_dir}/{case}{rank}", learner,
                                       **LEARNER_SETTINGS.get(learner, {}))
                   for case in DUAL_CASES}
        if rank == 0:
            torch.save(results, Path(out_dir) / "dual_lora.pt")


# ---------------------------------------------------------------- the auxiliary-gradient cap and projection
TEXTS = ("What is 3 + 4? The answer is 7.", "What is 12 + 5?", "The answer is 29, not 28.")


class ShardedTextLoss:
    """An auxiliary objective on the policy's own tensors: ``weight`` x the mean cross-entropy of ``TEXTS``,
    each rank scoring the texts its :class:`LossShard` takes (padded with repeats weighted 0 where it asks)."""

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, weight: float):
        self.model, self.weight, self.policy_weight = model, weight, 1.0
        self.texts = [torch.tensor([tokenizer(text)["input_ids"]]) for text in TEXTS]

    def begin_step(self, episodes, step: int) -> None:
        pass

    def loss(self, rows, shard: LossShard = SINGLE_PROCESS) -> tuple[torch.Tensor, dict[str, float]]:
        mine = shard.take([ids.shape[1] for ids in self.texts])
        scored = mine + mine[:1] * shard.padding(len(mine), len(self.texts))
        losses = [torch.nn.functional.cross_entropy(self.model(input_ids=self.texts[i]).logits[0, :-1],
                                                    self.texts[i][0, 1:]) for i in scored]
        own = sum(losses[: len(mine)], torch.zeros(()))
        padding = sum(losses[len(mine):], torch.zeros(()))
        whole = shard.sum(torch.tensor([own.item()], dtype=torch.float64)).item()
        return self.weight * (own + 0.0 * padding) / len(self.texts), {"text/loss": whole / len(self.texts)}

    def end_step(self) -> dict[str, float]:
        return {}


# case -> config overrides, with an auxiliary loss weighted 100: the cap binds (the auxiliary gradient is far
# larger than the policy's), the projection removes a conflicting part, and both at once over microbatches of
# one row
SHAPED_CASES = {
    "cap": {"auxiliary_grad_ratio": 0.5},
    "projection": {"auxiliary_projection": True},
    "both-microbatches": {"auxiliary_grad_ratio": 0.5, "auxiliary_projection": True, "microbatch_size": 1},
}


def shaped_auxiliary_update(tokenizer: PreTrainedTokenizerBase, case: str, output_dir: str, learner: str) -> dict:
    """One update of ``SHAPED_CASES[case]`` with ``learner``: the whole weights and gradients, and the metrics."""
    trainer = make_trainer(tokenizer, "lora", "token_mean", 0.0, output_dir, learner=learner, **SHAPED_CASES[case],
                           **LEARNER_SETTINGS.get(learner, {}))
    trainer.auxiliary_loss = ShardedTextLoss(trainer.policy, tokenizer, weight=100.0)
    metrics = (trainer.parallel or trainer).update(make_batch(trainer))
    return {"weights": whole_weights(trainer), "grads": whole_grads(trainer), "metrics": metrics}


def run_shaped_auxiliary_rank(rank: int, port: int, tokenizer_dir: str, out_dir: str, learner: str) -> None:
    """One rank of every ``SHAPED_CASES`` update with ``learner``; rank 0 saves the results."""
    torchrun_environment(rank, port)
    with group_member(rank, out_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        results = {case: shaped_auxiliary_update(tokenizer, case, f"{out_dir}/{case}{rank}", learner)
                   for case in SHAPED_CASES}
        if rank == 0:
            torch.save(results, Path(out_dir) / "shaped.pt")


# ---------------------------------------------------------------- the echo loss
def echo_update(tokenizer: PreTrainedTokenizerBase, output_dir: str, learner: str, microbatch_size: int) -> dict:
    """One update with the echo loss on prompt tokens (row ``i`` learns ``i % 3`` observations, so the ranks'
    shares hold different counts) with ``learner``: the whole weights and gradients, and the metrics."""
    trainer = make_trainer(tokenizer, "lora", "token_mean", 0.0, output_dir, learner=learner, echo_coef=0.5,
                           microbatch_size=microbatch_size, **LEARNER_SETTINGS.get(learner, {}))
    spans = [(1, 3), (3, PROMPT)]  # token positions inside the prompt, which the policy loss does not train
    trainer.echo_targets = EchoTargets([spans[: row % 3] for row in range(ROWS)])
    metrics = (trainer.parallel or trainer).update(make_batch(trainer))
    return {"weights": whole_weights(trainer), "grads": whole_grads(trainer), "metrics": metrics}


def run_echo_rank(rank: int, port: int, tokenizer_dir: str, out_dir: str, learner: str) -> None:
    """One rank of :func:`echo_update` with ``learner`` in microbatches of one row; rank 0 saves the result."""
    torchrun_environment(rank, port)
    with group_member(rank, out_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        result = echo_update(tokenizer, f"{out_dir}/echo{rank}", learner, microbatch_size=1)
        if rank == 0:
            torch.save(result, Path(out_dir) / "echo.pt")
