"""``GRPOConfig``: every setting of the GRPO / DAPO / Dr.GRPO trainer, validated on construction."""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from worldgym.agents.llm.losses import AdvantageNorm, Aggregation
from worldgym.agents.llm.pretrained import DEFAULT_LORA_TARGETS
from worldgym.config import check_choice, check_device, check_field, check_positive_int, check_range
from worldgym.precision import Precision, check_precision, resolve_dtype
from worldgym.retention import check_retention
from worldgym.tracking import check_report_to
from worldgym.transcripts import LogEpisodes, check_log_episodes

__all__ = ["GRPOConfig"]


@dataclass
class GRPOConfig:
    """GRPO/DAPO trainer settings. Defaults follow DAPO (clip 0.2/0.28, token-mean) with LoRA on a tiny model.

    Attributes:
        model: "tiny"/"small" (a Qwen3 built from config with a tokenizer trained on env text) or a hub name /
            local path for from_pretrained (ignored when the trainer is given a model).
        finetune: "lora" (PEFT adapters; the KL reference is the base with adapters disabled) or "full".
        lora_rank: rank of the LoRA adapter.
        lora_alpha: LoRA scaling numerator (the update is scaled by alpha / rank).
        lora_target_modules: module names the LoRA adapter wraps.
        device: "cpu", "cuda" or "cuda:N".
        cpu_mmap_threshold: on the CPU, the trainer asks glibc to map every allocation of at least this many
            bytes on its own (:func:`worldgym.agents.llm.allocator.map_large_allocations`, process-wide; e.g.
            ``DEFAULT_MMAP_THRESHOLD``): freed activations then leave the process instead of piling up in
            malloc's heap, at the cost of fresh pages for every large tensor (``cpu_allocator_memory.py``: a
            SmolLM2 backward held ~9x less memory, and took longer). None (default) leaves malloc as it is.
        cpu_release_heap: on the CPU, after every microbatch's backward and every rollout batch, give the free
            pages of malloc's heap back to the system (:func:`worldgym.agents.llm.allocator.release_free_heap`):
            freed activations leave the process while large tensors are still served from the heap, without
            the fresh pages ``cpu_mmap_threshold`` costs.
        dtype: numeric precision, "float32", "bfloat16" or "auto" (bf16 on a CPU with AMX-BF16/AVX512-BF16 or a
            CUDA device with bf16, else float32; :mod:`worldgym.precision`). Under bf16 the frozen base weights are
            stored in bf16, trainable tensors and optimizer state stay float32, forward passes (rollouts and
            updates) run under autocast, and logits, log-softmax, losses and advantages are float32. The trainer's
            ``dtype`` attribute holds what "auto" resolved to (checkpoints record it too).
        recompute_old_logprobs: before a step's first update, score the episodes again with the learner's own
            forward and use those as the PPO ratio's old logprobs (the engine's incremental logprobs and the
            learner's full forward differ by rounding under bf16; in float32 they are equal). None: on under
            bf16, off in float32. The engine-vs-learner gap is logged as ``precision/logprob_gap_mean|max``.
        importance_sampling_cap: where the old logprobs are recomputed, weight each trained token's loss by the
            truncated importance ratio ``min(pi_learner / pi_engine, cap)`` of the learner's probability of the
            sampled token over the engine's (truncated importance sampling, as TRL and verl apply to vLLM
            rollouts), so the gradient is the learner's own policy gradient; None: no weights. Logged as
            ``precision/is_weight_mean`` and ``precision/is_weight_capped`` (the share of tokens at the cap).
        bf16_autocast: deprecated spelling of ``dtype="bfloat16"``.
        env_id: the training env, gym.make(env_id, **env_kwargs); text in, text out: a tool-call env (its action
            space a ToolCallSpace) is wrapped in ParseToolCall (:func:`worldgym.agents.llm.envs.make_text_env`).
        env_kwargs: keyword arguments of the training env.
        eval_env_kwargs: overrides of env_kwargs for the validation env (e.g. {"split": "test"}).
        wrap_tool_calls: deprecated and ignored: the env's action space decides whether it is wrapped.
        vectorization_mode: "none": training episodes in a pool of single envs; "sync" / "async": in a gymnasium
            vector env of prompts_per_step * group_size sub-envs (async: one subprocess each). Validation
            always uses single envs.
        prompts_per_step: distinct tasks per step.
        group_size: samples per task (the GRPO group; >= 2).
        max_new_tokens: tokens sampled per model reply.
        temperature: sampling temperature of training rollouts (> 0; validation is greedy).
        top_p: nucleus sampling mass of training rollouts.
        max_turns: model replies per episode.
        max_episode_tokens: tokens per episode (prompt, replies and observations).
        decoding: "free", or "constrained": tool arguments the env's schema marks as copied take only values its
            observations showed, in rollouts and validation alike, and the learner scores those tokens over the
            same allowed set (worldgym.agents.llm.constrained).
        eps_low: lower PPO clip range.
        eps_high: upper PPO clip range (DAPO clip-higher: above eps_low).
        loss_aggregation: "token_mean" (DAPO), "seq_mean" (GRPO) or "dr_grpo".
        advantage_norm: "group_std" (GRPO) or "none" (Dr.GRPO).
        kl_coef: k3 KL penalty to the reference (0 = off, no reference forward).
        entropy_coef: entropy bonus.
        dynamic_sampling: DAPO: drop groups whose rewards are all equal and resample to refill the batch.
        max_resample_rounds: resampling rounds of dynamic sampling per step.
        first_round_prompts: tasks sampled in a step's first round (0: ``prompts_per_step``). Where most steps
            need a second round anyway, sampling those groups in the first one runs them in the same batch, which
            shares every decoding step's weight reads and per-step overheads; at most ``prompts_per_step``
            informative groups are kept. Without dynamic sampling only ``prompts_per_step`` are sampled.
        overlong_buffer: DAPO soft length penalty: tokens before the length limit where it starts (0 = off).
        overlong_penalty: the soft length penalty at the limit.
        learning_rate: AdamW learning rate (> 0).
        weight_decay: AdamW weight decay.
        grad_clip: gradient-norm clip (> 0).
        ppo_epochs: passes over each step's batch.
        minibatch_size: episodes per optimizer step.
        microbatch_size: episodes per forward/backward pass within a minibatch (gradient accumulation: the
            terms are weighted by each microbatch's share of the minibatch's tokens or rows, so the step equals
            one pass over the whole minibatch); 0 = the whole minibatch at once. Under a data-parallel learner
            each rank splits its share of the minibatch so.
        activation_checkpointing: recompute each layer's activations in the backward pass instead of keeping
            them (real models on long multi-turn episodes: memory grows with tokens x layers otherwise).
        checkpointing_min_tokens: with ``activation_checkpointing``, recompute only in microbatches of at least
            this many token positions (rows x their longest sequence); shorter ones keep their activations and
            skip the recomputation (0: recompute in every microbatch).
        auxiliary_grad_ratio: with an auxiliary loss (e.g. the dual-LoRA world model), cap its gradient at this
            multiple of the policy loss's gradient norm, both measured on the tensors both gradients reach, per
            minibatch (None: no cap). A loss that shares tensors with the policy and has a ~100x larger
            gradient otherwise takes them over. Costs a copy of the policy's gradient and a backward pass of
            the auxiliary loss's own (under a data-parallel learner every rank then scores as many of its
            examples, and the norms are of the gradients summed over the ranks).
        auxiliary_projection: with an auxiliary loss, drop the part of its gradient that points against the
            policy's before any cap (PCGrad: where the two conflict on the tensors both reach, the auxiliary
            gradient loses its component along the policy's). Costs as the cap; any learner.
        echo_coef: weight of the echo loss (0 = off): the cross-entropy of the env's tool results, scored in the
            rollout's own sequence by the same forward pass as the policy loss, each observation
            length-normalised (:mod:`worldgym.agents.grpo.echo`; invalid calls' errors left out).
        echo_tools: the tools whose results the echo loss learns (empty: every tool's).
        num_steps: training steps of the run.
        seed: seeds the model init, sampling and the task order.
        share_prompt_prefix: run the opening that a group's samples share (their prompt) once per group, in the
            engine's prefill and the training forward/backward, instead of once per sample (same results up to
            float rounding).
        min_shared_prefix: the shortest opening the engine shares.
        output_dir: run directory (metrics.jsonl, checkpoints).
        eval_every: steps between validations (0 = none).
        eval_episodes: validation episodes (0 = none).
        checkpoint_every: steps between checkpoints (0 = only at the end).
        save_total_limit: step checkpoints (``checkpoint-<n>``) kept, the newest (None: all);
            ``checkpoint-last`` and ``checkpoint-best`` come on top (:mod:`worldgym.retention`).
        metric_for_best_model: the validation metric whose best value so far is saved as ``checkpoint-best``
            (and recorded in ``results.json``); None: no best checkpoint.
        greater_is_better: whether a larger ``metric_for_best_model`` is better.
        log_episodes: which episodes go to transcripts (:mod:`worldgym.transcripts`; ``worldgym runs show``):
            "validation" (every validation's, to ``episodes/step-<n>.jsonl``), "all" (also a few sampled training
            episodes per step, to ``episodes/train-step-<n>.jsonl``) or "none".
        report_to: where metrics also go besides ``metrics.jsonl`` (TRL's name): "none", "tensorboard",
            "wandb", "all" or a list of them (:mod:`worldgym.tracking`; needs the ``tracking`` extra); every
            validation also logs a table of its episodes there.
        progress: show a progress bar.
        runtime: where training rollouts run: "local" (the trainer's process) or "ray" (rollout workers,
            worldgym.agents.llm.ray_rollouts.RayRollouts; validation stays in the trainer's process).
        num_rollout_workers: Ray rollout workers (each a copy of the policy with its own engine and envs).
        rollout_worker_cpus / rollout_worker_gpus: Ray resources each rollout worker reserves (e.g. 0 / 1 puts
            inference on GPUs of its own beside the learner's).
        async_rollouts: with runtime="ray", generate the next step's first round while the learner updates
            (the episodes are one update old: lag 1); off: every batch comes from the current weights.
        max_policy_lag: the oldest weights a trained batch may come from, in updates; older rollouts are
            refused and generated again (the lag of every batch is logged).
        max_worker_restarts: restarts of a rollout worker that dies (its share of the request is re-run).
        ray_address: an existing Ray cluster to attach to (None: the running one, or a new local one).
        learner: "single" (this process updates), "ddp" or "fsdp": data-parallel updates over the processes
            of a torch.distributed group (launch with torchrun; worldgym.distributed.DDPLearner, or
            FSDPLearner, whose ranks each hold a shard of the weights and optimizer state): rank 0 runs the
            rollouts (in process or on Ray), every rank updates on its share of each minibatch (and of the
            auxiliary loss's examples, e.g. the dual-LoRA world model's phone calls), and only rank 0 validates,
            logs and writes checkpoints.
    """

    model: str = "tiny"
    finetune: Literal["lora", "full"] = "lora"
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS
    device: str = "cpu"
    cpu_mmap_threshold: int | None = None
    cpu_release_heap: bool = False
    dtype: Precision = "float32"
    recompute_old_logprobs: bool | None = None
    importance_sampling_cap: float | None = 2.0
    bf16_autocast: bool = False

    env_id: str = "MathQA-v1"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "test"})
    wrap_tool_calls: bool | None = None
    vectorization_mode: Literal["none", "sync", "async"] = "none"
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_turns: int = 1
    max_episode_tokens: int = 2048
    decoding: Literal["free", "constrained"] = "free"

    eps_low: float = 0.2
    eps_high: float = 0.28
    loss_aggregation: Aggregation = "token_mean"
    advantage_norm: AdvantageNorm = "group_std"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    dynamic_sampling: bool = False
    max_resample_rounds: int = 3
    first_round_prompts: int = 0
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0

    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    minibatch_size: int = 64
    microbatch_size: int = 0
    activation_checkpointing: bool = False
    checkpointing_min_tokens: int = 0
    auxiliary_grad_ratio: float | None = None
    auxiliary_projection: bool = False
    echo_coef: float = 0.0
    echo_tools: tuple[str, ...] = ()
    num_steps: int = 50
    seed: int = 0
    share_prompt_prefix: bool = True
    min_shared_prefix: int = 16

    output_dir: str = "runs/grpo"
    eval_every: int = 10
    eval_episodes: int = 32
    checkpoint_every: int = 0
    save_total_limit: int | None = None
    metric_for_best_model: str | None = "eval/success_rate"
    greater_is_better: bool = True
    log_episodes: LogEpisodes = "validation"
    report_to: str | list[str] = "none"
    progress: bool = True

    runtime: Literal["local", "ray"] = "local"
    num_rollout_workers: int = 1
    rollout_worker_cpus: float = 1.0
    rollout_worker_gpus: float = 0.0
    async_rollouts: bool = False
    max_policy_lag: int = 1
    max_worker_restarts: int = 3
    ray_address: str | None = None
    learner: Literal["single", "ddp", "fsdp"] = "single"

    def __post_init__(self) -> None:
        self.lora_target_modules = tuple(self.lora_target_modules)
        check_choice("finetune", self.finetune, ("lora", "full"))
        check_choice("loss_aggregation", self.loss_aggregation, ("token_mean", "seq_mean", "dr_grpo"))
        check_choice("advantage_norm", self.advantage_norm, ("group_std", "none"))
        check_choice("vectorization_mode", self.vectorization_mode, ("none", "sync", "async"))
        check_choice("decoding", self.decoding, ("free", "constrained"))
        check_choice("runtime", self.runtime, ("local", "ray"))
        check_choice("learner", self.learner, ("single", "ddp", "fsdp"))
        for name in ("lora_rank", "lora_alpha", "prompts_per_step", "max_new_tokens", "max_turns", "ppo_epochs",
                     "minibatch_size", "num_steps", "max_episode_tokens", "min_shared_prefix", "num_rollout_workers"):
            check_positive_int(name, getattr(self, name))
        check_field(self.group_size >= 2, "group_size", self.group_size,
                    "use >= 2 (group-relative advantages need a group)")
        for name in ("eps_low", "eps_high"):
            check_range(name, getattr(self, name), 0, 1, low_open=True, high_open=True)
        for name in ("kl_coef", "entropy_coef", "weight_decay", "temperature", "eval_every", "eval_episodes",
                     "checkpoint_every", "overlong_buffer", "max_resample_rounds", "overlong_penalty",
                     "microbatch_size", "first_round_prompts", "checkpointing_min_tokens"):
            check_range(name, getattr(self, name), 0, None)
        check_field(self.temperature > 0, "temperature", self.temperature,
                    "use > 0 for training rollouts (greedy groups are all identical, so every advantage would be "
                    "0); validation already decodes greedily")
        check_range("top_p", self.top_p, 0, 1, low_open=True)
        check_retention(self.save_total_limit)
        check_log_episodes(self.log_episodes)
        check_report_to(self.report_to)
        check_range("learning_rate", self.learning_rate, 0, None, low_open=True)
        check_range("grad_clip", self.grad_clip, 0, None, low_open=True)
        longest = self.max_new_tokens * self.max_turns
        check_field(self.overlong_buffer <= longest, "overlong_buffer", self.overlong_buffer,
                    f"use at most the longest response, max_new_tokens * max_turns = {longest}")
        check_device("device", self.device)
        if self.bf16_autocast:
            warnings.warn("GRPOConfig.bf16_autocast is deprecated: use dtype='bfloat16'", DeprecationWarning,
                          stacklevel=3)
            self.dtype, self.bf16_autocast = "bfloat16", False
        check_precision("dtype", self.dtype)
        if self.wrap_tool_calls is not None:
            warnings.warn("GRPOConfig.wrap_tool_calls is deprecated and ignored: an env whose action space is a "
                          "ToolCallSpace is always wrapped in ParseToolCall; drop the argument", DeprecationWarning,
                          stacklevel=3)
            self.wrap_tool_calls = None
        check_field(self.learner != "fsdp" or resolve_dtype(self.dtype, self.device) == torch.float32, "dtype",
                    self.dtype, "use 'float32' with learner='fsdp' (FSDP shards frozen bf16 and trainable float32 "
                    "tensors of one module together, which it cannot), or learner='ddp'")
        if self.recompute_old_logprobs is not None:
            check_choice("recompute_old_logprobs", self.recompute_old_logprobs, (True, False, None))
        if self.importance_sampling_cap is not None:
            check_field(self.importance_sampling_cap >= 1, "importance_sampling_cap", self.importance_sampling_cap,
                        "use >= 1 (a cap below 1 would shrink tokens both policies agree on), or None for no weights")
        if self.cpu_mmap_threshold is not None:
            check_positive_int("cpu_mmap_threshold", self.cpu_mmap_threshold)
        check_range("max_policy_lag", self.max_policy_lag, 0, None)
        check_range("max_worker_restarts", self.max_worker_restarts, 0, None)
        check_range("rollout_worker_cpus", self.rollout_worker_cpus, 0, None)
        check_range("rollout_worker_gpus", self.rollout_worker_gpus, 0, None)
        check_field(not self.async_rollouts or self.runtime == "ray", "async_rollouts", self.async_rollouts,
                    "use runtime='ray' (in process, rollouts and updates take turns)")
        check_field(not self.async_rollouts or self.max_policy_lag >= 1, "max_policy_lag", self.max_policy_lag,
                    "use >= 1 with async_rollouts (their episodes are one update old)")
        if self.auxiliary_grad_ratio is not None:
            check_range("auxiliary_grad_ratio", self.auxiliary_grad_ratio, 0, None, low_open=True)
        check_range("echo_coef", self.echo_coef, 0, None)
        check_field(not isinstance(self.echo_tools, str), "echo_tools", self.echo_tools,
                    f"use a tuple of tool names, e.g. ({self.echo_tools!r},)")
        self.echo_tools = tuple(self.echo_tools)
        check_field(all(isinstance(tool, str) and tool for tool in self.echo_tools), "echo_tools", self.echo_tools,
                    "use a tuple of tool names, e.g. ('make_phone_call',)")
        check_field(self.learner != "fsdp" or not self.share_prompt_prefix, "share_prompt_prefix",
                    self.share_prompt_prefix, "use False with learner='fsdp': every forward all-gathers the "
                    "layers it runs, so the ranks must run as many, and the shared-prefix pass runs one or two "
                    "per rank depending on its rows")

    @property
    def echo_weight(self) -> float:
        """The echo loss's weight the trainer applies (``echo_coef``; 0 = off)."""
        return self.echo_coef

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-compatible data (stored in checkpoints)."""
        data = asdict(self)
        data["lora_target_modules"] = list(self.lora_target_modules)
        data["echo_tools"] = list(self.echo_tools)
        return data

