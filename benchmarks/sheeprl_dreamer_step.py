"""Seconds per sheeprl 0.8.4 Dreamer v3 gradient step on CPU, in sheeprl's own venv (its pins clash with ours).

    python -m venv runs/sheeprl-venv
    runs/sheeprl-venv/bin/pip install torch==2.13.0 sheeprl==0.8.4     # ~40 s, ~30 packages
    python benchmarks/sheeprl_dreamer_step.py --size XS --steps 4        # any python: see below
    python benchmarks/sheeprl_dreamer_step.py --size XS --precision bf16-mixed   # Fabric's bf16 autocast
    python benchmarks/sheeprl_dreamer_step.py --quick                    # 1 step of a 2 x 8 batch

Builds sheeprl's own agent from its Hydra configs (vector obs of CartPole shape, 2 discrete actions) and
times its ``train`` (world model + behavior) on a random batch of ``batch_size x seq_len``, the shape
``benchmarks/dreamer.py speed`` uses, in Fabric's ``--precision`` (``32-true``, sheeprl's default, or
``bf16-mixed``: sheeprl's ``fabric.precision``, forward passes under bf16 autocast). Writes wall and CPU seconds
per step to ``sheeprl_dreamer_step.json`` in ``benchmarks/results/`` (``--results-dir``), one row per size, batch,
length, thread count and precision (a new measurement replaces the row with the same settings; rows without a
``precision`` were measured in ``32-true``); ``dreamer.py speed`` reads them from there.

When this python has no sheeprl, the script runs itself again with ``$WORLDGYM_SHEEPRL_PYTHON`` or
``runs/sheeprl-venv/bin/python``; with neither, it says so and exits 0 without writing anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import REPO, results_dir, results_parser, write_json  # stdlib only: no worldgym here

SHEEPRL_PYTHON = "WORLDGYM_SHEEPRL_PYTHON"
DEFAULT_VENV_PYTHON = REPO / "runs" / "sheeprl-venv" / "bin" / "python"
RESULTS_NAME = "sheeprl_dreamer_step.json"
PRECISIONS = ("32-true", "bf16-mixed")  # Fabric's names
DEFAULT_PRECISION = "32-true"  # sheeprl's default, and that of rows written before rows named one
SAME_SETTINGS = ("size", "batch_size", "seq_len", "threads", "precision")


def row_precision(row: dict[str, Any]) -> str:
    """A results row's Fabric precision (``32-true`` for rows from before the option)."""
    return row.get("precision", DEFAULT_PRECISION)


def sheeprl_python() -> Path | None:
    """The interpreter of a venv with sheeprl: ``$WORLDGYM_SHEEPRL_PYTHON``, else ``runs/sheeprl-venv``."""
    candidate = Path(os.environ.get(SHEEPRL_PYTHON, DEFAULT_VENV_PYTHON))
    return candidate if candidate.is_file() else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser()])
    parser.add_argument("--size", default="XS", help="sheeprl's algo config dreamer_v3_<size>")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                        help="Fabric precision (sheeprl's fabric.precision)")
    parser.add_argument("--label", default="", help="e.g. 'shared-load' when other jobs share the CPU")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.batch_size, args.seq_len = 1, 2, 8
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Measure and write the row (``None``: sheeprl is not installed, nothing measured)."""
    args = parse_args(argv)
    if importlib.util.find_spec("sheeprl") is None:
        python = sheeprl_python()
        if python is None or os.environ.get("_WORLDGYM_SHEEPRL_REEXEC"):  # the latter: that python lacks it too
            print(f"skipped: sheeprl is not installed in {sys.executable} and there is no venv with it "
                  f"(set {SHEEPRL_PYTHON} or create runs/sheeprl-venv, see this script's docstring)")
            return None
        os.environ["_WORLDGYM_SHEEPRL_REEXEC"] = "1"
        os.execv(python, [str(python), __file__, *(sys.argv[1:] if argv is None else argv)])
    from worldgym.machine import machine_info  # stdlib (and torch) only, like this script

    row = measure(args) | {"machine": machine_info()}  # rows made on other machines stay labelled
    path = results_dir(args) / RESULTS_NAME
    table = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    table["rows"] = [r for r in table["rows"] if not _same_settings(r, row)] + [row]
    table["quick"] = args.quick
    write_json(path, table)
    return row


def _same_settings(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return all((row_precision(old) if k == "precision" else old[k]) == new[k] for k in SAME_SETTINGS)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Wall and CPU seconds per gradient step of sheeprl's agent (after one warm-up step)."""
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
        f"fabric.precision={args.precision}",
        "metric.log_level=0",
    ]
    with initialize_config_module("sheeprl.configs", version_base="1.3"):
        cfg = dotdict(OmegaConf.to_container(compose("config", overrides=overrides), resolve=True))
    fabric = Fabric(accelerator="cpu", devices=1, precision=args.precision)
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

    load = os.getloadavg()[0]
    step()  # warm-up
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - start) / args.steps
    cpu_seconds = (time.process_time() - cpu_start) / args.steps  # CPU time: less sensitive to other jobs
    row = {
        "sheeprl": version("sheeprl"),
        "torch": torch.__version__,
        "size": args.size,
        "s_per_step": seconds,
        "cpu_s_per_step": cpu_seconds,
        "steps": args.steps,
        "batch_size": B,
        "seq_len": T,
        "threads": args.threads,
        "precision": args.precision,
        "load_average_before": load,
        "label": args.label,
        "quick": args.quick,
    }
    print(json.dumps(row))
    return row


if __name__ == "__main__":
    main()
