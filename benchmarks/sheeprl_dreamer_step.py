"""Seconds per sheeprl 0.8.4 Dreamer v3 gradient step on CPU (run it with the separate sheeprl venv).

    /work/sheeprl-venv/bin/python benchmarks/sheeprl_dreamer_step.py --size XS --steps 3

Builds sheeprl's own agent from its Hydra configs (vector obs of CartPole shape, 2 discrete actions) and
times its ``train`` (world model + behavior) on a random batch of ``batch_size x seq_len``, the shape
``benchmarks/dreamer.py speed`` uses. Prints one JSON line (wall and CPU seconds per step); pass its figures
to ``dreamer.py speed --sheeprl-s-per-step`` and ``--sheeprl-cpu-s-per-step``.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from hydra import compose, initialize_config_module
from lightning import Fabric
from omegaconf import OmegaConf
from sheeprl.algos.dreamer_v3.agent import build_agent
from sheeprl.algos.dreamer_v3.dreamer_v3 import train
from sheeprl.algos.dreamer_v3.utils import Moments
from sheeprl.utils.utils import dotdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="XS")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = [
        "exp=dreamer_v3",
        f"algo=dreamer_v3_{args.size}",
        "env=gym",
        "env.id=CartPole-v1",
        "algo.cnn_keys.encoder=[]",
        "algo.cnn_keys.decoder=[]",
        "algo.mlp_keys.encoder=[vector]",
        "algo.mlp_keys.decoder=[vector]",
        f"algo.per_rank_batch_size={args.batch_size}",
        f"algo.per_rank_sequence_length={args.seq_len}",
        "fabric.accelerator=cpu",
        "metric.log_level=0",
    ]
    with initialize_config_module("sheeprl.configs", version_base="1.3"):
        cfg = dotdict(OmegaConf.to_container(compose("config", overrides=overrides), resolve=True))
    fabric = Fabric(accelerator="cpu", devices=1)
    obs_space = gym.spaces.Dict({"vector": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)})
    world_model, actor, critic, target_critic, _ = build_agent(fabric, [2], False, cfg, obs_space)
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-4, eps=1e-8) for m in (world_model, actor, critic)]
    optimizers = fabric.setup_optimizers(*optimizers)
    moments = Moments(0.99, 1.0, 0.05, 0.95)
    T, B = args.seq_len, args.batch_size
    gen = torch.Generator().manual_seed(0)
    data = {
        "vector": torch.randn(T, B, 4, generator=gen),
        "actions": torch.nn.functional.one_hot(torch.randint(2, (T, B), generator=gen), 2).float(),
        "rewards": torch.ones(T, B, 1),
        "terminated": torch.zeros(T, B, 1),
        "truncated": torch.zeros(T, B, 1),
        "is_first": torch.zeros(T, B, 1),
    }

    def step() -> None:
        train(
            fabric,
            world_model,
            actor,
            critic,
            target_critic,
            *optimizers,
            data,
            None,
            cfg,
            False,
            [2],
            moments,
        )

    step()  # warm-up
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - start) / args.steps
    cpu_seconds = (time.process_time() - cpu_start) / args.steps  # CPU time: less sensitive to other jobs
    print(
        json.dumps(
            {
                "sheeprl": "0.8.4",
                "size": args.size,
                "s_per_step": seconds,
                "cpu_s_per_step": cpu_seconds,
                "batch_size": B,
                "seq_len": T,
                "threads": args.threads,
            }
        )
    )


if __name__ == "__main__":
    main()
