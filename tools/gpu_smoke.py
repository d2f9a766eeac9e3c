"""Smoke-test the library's CUDA paths in bf16 in a few minutes, and record what ran, what matched the CPU path
and how fast, as one JSON file.

Phases (each timed; a phase that fails records its error and the next one still runs; the JSON is rewritten
after every phase, so a run cut short keeps what finished):
  * ``engine_match``: a tiny Qwen3 decodes greedily with ``HFEngine`` on the CPU (float32) and on CUDA
    (float32 and bf16); how many sequences are identical and the largest logprob difference.
  * ``grpo_tiny`` / ``grpo_small``: a few bf16 GRPO steps on MathQA-v1 with the engine on CUDA (recomputed
    old logprobs, the engine-vs-learner logprob gap, step times).
  * ``dreamer_async``: Dreamer v3's async actor/learner engine on CUDA streams, bf16, CartPole, a few hundred
    env steps.
  * ``ztoken_ppo``: Z-token PPO rollouts and updates on CUDA in bf16.
  * ``cartridge``: cartridge distillation steps on CUDA in bf16.

It needs torch with CUDA, transformers, peft and safetensors. Packages it lacks (gymnasium and its two small
dependencies) are installed from ``--wheels DIR`` (``pip download --no-deps -d DIR gymnasium
farama-notifications cloudpickle`` on a machine with a network), with no index.

    python tools/gpu_smoke.py --wheels wheels/ --out benchmarks/results/gpu/gpu_smoke.json
    python tools/gpu_smoke.py --device cpu --out /tmp/smoke.json      # the script itself, without a GPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NEEDED = {"gymnasium": "gymnasium", "farama_notifications": "farama-notifications", "cloudpickle": "cloudpickle"}


def install_missing(wheels: Path | None) -> list[str]:
    """pip-install, from ``wheels`` only, the packages in :data:`NEEDED` this Python lacks; their names."""
    missing = [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        if wheels is None:
            raise SystemExit(f"missing packages {missing}: pass --wheels DIR holding their wheels")
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                        *missing], check=True)
    return missing


def engine_match(scratch: Path, device: str) -> dict[str, Any]:
    import torch

    from worldgym.agents.llm.engines import HFEngine, SamplingParams
    from worldgym.agents.llm.models import build_tiny_model, sharpen
    from worldgym.agents.llm.tokenizer import train_chat_tokenizer

    corpus = [f"What is {a} plus {b}? The answer is {a + b}." for a in range(40) for b in range(40)]
    tokenizer = train_chat_tokenizer(corpus, vocab_size=500)
    prompts = [tokenizer(f"What is {a} plus {a + 3}?")["input_ids"] for a in range(8)]
    params = SamplingParams(max_new_tokens=24, temperature=0.0, seed=0)
    runs = {}
    for name, where, dtype in (("cpu_float32", "cpu", torch.float32), ("device_float32", device, torch.float32),
                               ("device_bfloat16", device, torch.bfloat16)):
        model = sharpen(build_tiny_model(tokenizer, seed=0), 3.0).to(device=where, dtype=dtype)
        engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
        start = time.perf_counter()
        runs[name] = ([g[0] for g in engine.generate(prompts, params)], time.perf_counter() - start)
    reference = runs["cpu_float32"][0]
    out: dict[str, Any] = {"prompts": len(prompts)}
    for name, (generations, seconds) in runs.items():
        same = [g.token_ids == r.token_ids for g, r in zip(generations, reference)]
        gaps = [abs(a - b) for g, r, s in zip(generations, reference, same) if s
                for a, b in zip(g.logprobs, r.logprobs)]
        out[name] = {"identical_to_cpu_float32": sum(same), "max_logprob_gap": max(gaps, default=0.0),
                     "seconds": seconds}
    return out


def grpo(scratch: Path, size: str, device: str) -> dict[str, Any]:
    from worldgym.agents.grpo import GRPOConfig, GRPOTrainer

    config = GRPOConfig(model=size, device=device, dtype="bfloat16", num_steps=3, prompts_per_step=4,
                        group_size=4, max_new_tokens=32, eval_every=0, progress=False, minibatch_size=8,
                        output_dir=str(scratch / f"grpo_{size}"))
    # the parity of the episode's token ids: a reward that differs within groups, so every step updates
    trainer = GRPOTrainer(config, reward_fn=lambda episode: float(sum(episode.token_ids) % 2))
    history = trainer.train()
    keys = ("loss/total", "loss/ratio_first_minibatch", "precision/logprob_gap_mean", "precision/logprob_gap_max",
            "rollout/reward_mean", "time/rollout_s", "time/update_s", "time/step_s")
    return {"dtype": str(trainer.dtype), "device": str(next(trainer.policy.parameters()).device),
            "steps": [{k: row[k] for k in keys if k in row} for row in history]}


def dreamer_async(scratch: Path, device: str) -> dict[str, Any]:
    import torch

    from worldgym.agents.dreamer_v3.config import DreamerConfig, ReplayConfig, ScheduleConfig, model_size
    from worldgym.agents.dreamer_v3.engine.async_engine import AsyncEngine

    config = DreamerConfig(
        env_id="CartPole-v1", num_envs=4, num_steps=400, seed=0, model=model_size("XS"), device=device,
        dtype="bfloat16", replay=ReplayConfig(capacity=1024, seq_len=16, batch_size=8, min_ready_steps=16),
        schedule=ScheduleConfig(replay_ratio=0.5, learning_starts=64, pretrain_steps=4, rollout_window=8),
        log_every=100, output_dir=str(scratch / "dreamer"), progress=False, engine="async")
    engine = AsyncEngine(config)
    start = time.perf_counter()
    final = engine.run(progress=False)
    seconds = time.perf_counter() - start
    finite = all(bool(torch.isfinite(p).all()) for p in engine.core.learner.parameters())
    return {"env_steps": config.num_steps, "seconds": seconds, "finite_weights": finite,
            "replay_device": str(engine.core.replay.storage["obs"].device),
            **{k: v for k, v in final.items() if isinstance(v, (int, float))}}


def ztoken_ppo(scratch: Path, device: str) -> dict[str, Any]:
    from worldgym.agents.ztoken_ppo import ZTokenModelConfig, ZTokenPPOConfig, ZTokenPPOTrainer

    model = ZTokenModelConfig(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                              intermediate_size=256)
    config = ZTokenPPOConfig(model=model, env_kwargs={"num_z_tokens": 4, "max_new_tokens": 6},
                             num_envs=16, episodes_per_rollout=64, num_steps=3, eval_every=3, eval_episodes=16,
                             device=device, dtype="bfloat16", output_dir=str(scratch / "ztoken"), progress=False)
    trainer = ZTokenPPOTrainer(config)
    start = time.perf_counter()
    history = trainer.train()
    return {"seconds": time.perf_counter() - start, "rows": history[-2:]}


def cartridge(scratch: Path, device: str) -> dict[str, Any]:
    from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
    from worldgym.agents.llm import build_tiny_model, train_chat_tokenizer
    from worldgym.envs.longhealth import generate_panel

    panel = generate_panel(3, 0)
    corpus = [text for patient in panel.values() for text in patient["texts"].values()]
    corpus += [q["question"] for patient in panel.values() for q in patient["questions"]]
    tokenizer = train_chat_tokenizer(corpus, vocab_size=1000)
    config = CartridgeDistillConfig(env_kwargs={"num_patients": 3, "task": 1}, num_tokens=32, num_steps=3,
                                    questions_per_step=4, samples_per_question=2, max_new_tokens=16,
                                    eval_every=0, device=device, dtype="bfloat16",
                                    output_dir=str(scratch / "cartridge"), progress=False)
    trainer = CartridgeDistillTrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer)
    start = time.perf_counter()
    history = trainer.train()
    return {"seconds": time.perf_counter() - start, "rows": history[-2:]}


def run_phase(name: str, phase: Callable[[], dict[str, Any]], results: dict[str, Any], out: Path) -> None:
    start = time.perf_counter()
    try:
        results["phases"][name] = {"ok": True, **phase()}
    except Exception as error:  # noqa: BLE001  (a smoke test records every failure and goes on)
        results["phases"][name] = {"ok": False, "error": f"{type(error).__name__}: {error}",
                                   "traceback": traceback.format_exc()[-3000:]}
    results["phases"][name]["wall_s"] = time.perf_counter() - start
    print(f"{name}: {'ok' if results['phases'][name]['ok'] else 'FAILED'} "
          f"({results['phases'][name]['wall_s']:.1f} s)", flush=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=None, help="folder of wheels for missing packages")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gpu" / "gpu_smoke.json")
    parser.add_argument("--phases", nargs="+", default=None, help="run only these phases")
    parser.add_argument("--device", default="cuda", help="'cpu' checks the script itself where there is no GPU")
    args = parser.parse_args(argv)
    installed = install_missing(args.wheels)
    sys.path.insert(0, str(REPO))
    import peft
    import torch
    import transformers

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this script checks the GPU paths (the CPU ones are in the test suite)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "peft": peft.__version__,
        "bf16_supported": torch.cuda.is_bf16_supported() if args.device.startswith("cuda") else None,
        "python": platform.python_version(), "installed_from_wheels": installed, "phases": {},
    }
    scratch = Path(tempfile.mkdtemp(prefix="worldgym_gpu_smoke_"))
    phases: dict[str, Callable[[], dict[str, Any]]] = {
        "engine_match": lambda: engine_match(scratch, args.device),
        "grpo_tiny": lambda: grpo(scratch, "tiny", args.device),
        "grpo_small": lambda: grpo(scratch, "small", args.device),
        "dreamer_async": lambda: dreamer_async(scratch, args.device),
        "ztoken_ppo": lambda: ztoken_ppo(scratch, args.device),
        "cartridge": lambda: cartridge(scratch, args.device),
    }
    for name, phase in phases.items():
        if args.phases is None or name in args.phases:
            run_phase(name, phase, results, args.out)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
