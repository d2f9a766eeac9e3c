"""Can the world model write a phone call's reply on its own? Its adapter trained alone on real phone calls, with
and without its own embedding rows of its markers (``DualLoRAConfig.wm_token_rows``), or (with the rows) on the
calls of the chats the warm start imitated (``expert-chats``: the warm-up ``DualLoRAConfig.wm_warmup_updates``
runs), and its free replies to held-out calls read by the env's ``classify_reply`` and ``nearest_reply_type``, as
an imagined call's reply is read.

From the dual-LoRA benchmark's warm start, the policy plays ``--episodes`` real episodes (train-split tasks, one
each, at the rollout temperature). Their phone calls are the data: the calls of the last ``--held-out`` episodes
are held out, the others train the world-model adapter alone (the ``separate-own-clip`` modes' adapter, learning
rate and clip), ``--calls-per-update`` calls per AdamW update, taken in the order the episodes made them (a
training step's minibatch gives the world model 8 recent calls and 2 replayed ones, 4 minibatches a step); the
``expert-chats`` variant's updates each take every call of ``--chats-per-update`` of the warm start's expert
chats (the warm-up's batches: :func:`~worldgym.agents.dual_lora.warmup.chat_batches`). Before
the first update and every ``--eval-every`` updates, the adapter writes a reply to each held-out call with the
imagined calls' own engine (sampled at the rollout temperature, at most ``imagined_reply_tokens`` tokens, ending
at ``<|/csr|>`` or another special token). Figures per evaluation: the share of replies whose type matches the
env's reply (``type_accuracy``; ``nearest_type_accuracy`` reads them with ``nearest_reply_type``, as
``imagined_reply_reading="nearest"`` does), the share that closed with ``<|/csr|>`` (``closed``), the mean reply
tokens, and the teacher-forced token accuracy on the held-out replies; every reply is kept (``replies``).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/world_model_replies.py --model smollm2-135m --difficulty 3 \\
        --mistake-rate 0.2 --continue-on 3 --temperature 0.5 --results-dir benchmarks/results/machines/<cpu>
    python benchmarks/world_model_replies.py --quick     # the tiny model, a minute (its figures mean nothing)

Writes ``world_model_replies.json`` (one entry per model and setting, every run kept; a run's row after every
evaluation, ``finished`` once all its variants are done) and a PNG of the type
accuracy and closed share against updates, every run of the setting (``--plot-only`` redraws it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

import worldgym  # noqa: F401  (registers the ids)
from worldgym.agents.dual_lora import DualLoRATrainer
from worldgym.agents.dual_lora.imagination import PhoneCallImagination, read_reply, reply_opening
from worldgym.agents.dual_lora.presets import dual_lora_config, engine
from worldgym.agents.dual_lora.warmup import chat_batches, chat_phone_calls, world_model_update
from worldgym.agents.dual_lora.world_model import PhoneCallExample, phone_call_examples, score_packed
from worldgym.agents.llm.adapters import using_adapters
from worldgym.agents.llm.allocator import release_free_heap
from worldgym.agents.llm.engines import SamplingParams
from worldgym.agents.llm.warm_start import expert_chats
from worldgym.machine import machine_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import (
    add_batch_flags,
    batch_settings,
    results_dir,
    results_parser,
    set_torch_threads,
    write_json,
)
from benchmarks.csr_dual_lora_vs_dapo import MODES, QUICK_CONFIG, warm_start, warm_start_chosen_config
from benchmarks.csr_warm_starts import warm_start_flags, warm_start_suffix
from benchmarks.evaluation_jobs import JobFolder

MODE = "separate-own-clip"  # the world model's adapter, learning rate and clip of the benchmark's modes
VARIANTS = {"without-rows": False, "with-rows": True, "expert-chats": True}  # name: wm_token_rows
EXPERT = "expert-chats"  # the variant that trains on the warm start's expert chats


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser(), warm_start_flags()])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=40, help="real episodes played for their phone calls")
    parser.add_argument("--held-out", type=int, default=8, help="the last episodes, whose calls are held out")
    parser.add_argument("--updates", type=int, default=32, help="world-model updates (8 steps of 4 minibatches)")
    parser.add_argument("--calls-per-update", type=int, default=10)
    parser.add_argument("--chats-per-update", type=int, default=4, help=f"the {EXPERT} variant's")
    parser.add_argument("--eval-every", type=int, default=8, help="updates between evaluations")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["without-rows", "with-rows"])
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the JSON's runs of the setting")
    add_batch_flags(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.held_out, args.updates, args.eval_every, args.max_turns = 4, 1, 2, 1, 4
    if not 0 < args.held_out < args.episodes:
        parser.error(f"--held-out must be between 1 and --episodes - 1, got {args.held_out}")
    return args


def make_trainer(args: argparse.Namespace, token_rows: bool) -> DualLoRATrainer:
    """A dual-LoRA trainer of the benchmark's world-model mode on a freshly loaded warm start."""
    ws = warm_start(args, args.model)
    quick = QUICK_CONFIG if args.quick else {"progress": False}
    config = dual_lora_config(args.model, args.difficulty, **MODES[MODE], wm_token_rows=token_rows,
                              max_turns=args.max_turns, eval_every=0, seed=args.seed,
                              output_dir=str(Path("runs") / "world_model_replies"), **batch_settings(args) | quick)
    return DualLoRATrainer(config, model=ws.model, tokenizer=ws.tokenizer,
                           make_engine=lambda policy: engine(args.model, policy, ws.tokenizer))


def real_calls(trainer: DualLoRATrainer, args: argparse.Namespace
               ) -> tuple[list[PhoneCallExample], list[PhoneCallExample]]:
    """The phone calls of ``args.episodes`` real episodes of the warm start: (training calls, held-out calls)."""
    first = trainer._draw_round(0, args.episodes)  # train-split tasks from the trainer's own generator
    episodes = trainer.collector.collect(first.seeds, 1, first.params)
    rows = phone_call_examples(episodes, trainer.tokenizer, trainer.config.wm_max_context_tokens)
    cut = len(rows) - args.held_out
    return [e for row in rows[:cut] for e in row], [e for row in rows[cut:] for e in row]


def evaluate(trainer: DualLoRATrainer, held_out: list[PhoneCallExample], update: int) -> dict[str, Any]:
    """The adapter's free replies to the held-out calls, and its teacher-forced token accuracy on them."""
    config, tokenizer = trainer.config, trainer.tokenizer
    imagination = PhoneCallImagination(trainer.policy, tokenizer, config,
                                       trainer.make_env().unwrapped.action_space, trainer.dtype)
    _, close = reply_opening(tokenizer, config)
    params = SamplingParams(temperature=config.temperature, max_new_tokens=config.imagined_reply_tokens,
                            seed=config.seed * 100_003)
    start = time.perf_counter()
    prompts = [list(example.token_ids[: example.target_start]) for example in held_out]  # ends in the opening
    replies = [g for i in range(0, len(prompts), 8) for g in imagination.replies(prompts[i : i + 8], params)]
    seconds = time.perf_counter() - start
    texts = [tokenizer.decode(g.token_ids, skip_special_tokens=True).strip() for g in replies]
    read = {reading: [read_reply(text, reading) for text in texts] for reading in ("exact", "nearest")}
    trainer.policy.eval()
    with torch.no_grad(), using_adapters(trainer.policy, [config.world_model_adapter], config.adapter_names):
        scores = score_packed(trainer.policy, held_out)
    trainer.policy.train()
    real = [example.response_type for example in held_out]
    return {"update": update, "type_accuracy": float(np.mean(np.array(read["exact"]) == real)),
            "nearest_type_accuracy": float(np.mean(np.array(read["nearest"]) == real)),
            "commonest_type_share": commonest_share(real),
            "closed": float(np.mean([bool(g.token_ids) and g.token_ids[-1] == close for g in replies])),
            "reply_tokens_mean": float(np.mean([len(g.token_ids) for g in replies])),
            "token_accuracy": float(scores.token_accuracy.mean()), "reply_s": seconds,
            "replies": [{"reply": text, "real_type": real_type, "exact": exact, "nearest": nearest}
                        for text, real_type, exact, nearest in zip(texts, real, read["exact"], read["nearest"])]}


def batches(trainer: DualLoRATrainer, name: str, train: list[PhoneCallExample], args: argparse.Namespace
            ) -> Iterator[list[PhoneCallExample]]:
    """The variant's training batches: ``train``'s calls in order (wrapping round), or the expert chats'."""
    if name == EXPERT:
        chats = expert_chats(warm_start_chosen_config(args, args.model))
        examples = chat_phone_calls(chats, trainer.tokenizer, trainer.config.wm_max_context_tokens)
        print(f"{sum(map(len, examples))} calls in {len(chats)} expert chats", flush=True)
        yield from chat_batches(examples, args.chats_per_update, trainer.config.seed)  # endless
        return
    for update in itertools.count():
        first = update * args.calls_per_update
        yield [train[(first + i) % len(train)] for i in range(args.calls_per_update)]


def train_and_evaluate(trainer: DualLoRATrainer, batches: Iterator[list[PhoneCallExample]],
                       held_out: list[PhoneCallExample], args: argparse.Namespace, curve: list[dict[str, Any]],
                       evaluated: Callable[[], None]) -> None:
    """``args.updates`` world-model-only AdamW updates over ``batches``, evaluated every ``args.eval_every`` (each
    evaluation appended to ``curve``, then ``evaluated()`` called)."""
    _, world_model = trainer._adapter_groups()
    config, losses = trainer.config, []
    for update in range(args.updates + 1):
        if update % args.eval_every == 0 or update == args.updates:
            curve.append(evaluate(trainer, held_out, update) | {"loss_mean": float(np.mean(losses or [np.nan]))})
            losses = []
            print(json.dumps({k: v for k, v in curve[-1].items() if k != "replies"}), flush=True)
            evaluated()
        if update == args.updates:
            return
        losses.append(world_model_update(
            trainer.policy, config.world_model_adapter, config.adapter_names, next(batches), trainer.optimizer,
            lambda: torch.nn.utils.clip_grad_norm_(world_model, config.grad_clip)))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    key = f"{args.model}-d{args.difficulty}-T{args.temperature or 1.0:g}{warm_start_suffix(args)}"
    path = results_dir(args) / "world_model_replies.json"
    if args.plot_only:
        plot_setting(path, key, args.quick)
        return
    set_torch_threads(1)
    start = time.perf_counter()
    trainer = make_trainer(args, VARIANTS[args.variants[0]])
    train, held_out = real_calls(trainer, args)
    print(f"{len(train)} training calls, {len(held_out)} held out ({time.perf_counter() - start:.0f} s)")
    if not train or not held_out:
        raise SystemExit("the episodes made no phone call to train on or hold out: play more (--episodes)")
    curves: dict[str, list[dict[str, Any]]] = {}
    settings = {k: getattr(args, k) for k in ("episodes", "held_out", "updates", "calls_per_update",
                                              "chats_per_update", "eval_every", "max_turns", "seed")}
    started_at, index = time.time(), None

    def save(finished: bool) -> None:
        """This run's row as it stands (written after every evaluation, so a stopped run keeps its figures)."""
        nonlocal index
        row = {"curves": curves, "training_calls": len(train), "held_out_calls": len(held_out),
               "quick": args.quick, "settings": settings, "finished": finished,
               "wall_s": time.perf_counter() - start, "started_at": started_at, "machine": machine_info()}
        with JobFolder(path.parent).claimed(path.stem, wait=True):
            table = json.loads(path.read_text()) if path.is_file() else {}
            runs = table.setdefault(key, {"runs": []})["runs"]
            index = len(runs) if index is None else index
            runs[index:index + 1] = [row]
            write_json(path, table)

    for name in args.variants:
        if trainer is None:
            trainer = make_trainer(args, VARIANTS[name])
        curves[name] = []
        train_and_evaluate(trainer, batches(trainer, name, train, args), held_out, args, curves[name],
                           lambda: save(finished=False))
        trainer = None
        release_free_heap()
    save(finished=True)
    plot_setting(path, key, args.quick)


def plot_setting(path: Path, key: str, quick: bool) -> None:
    """Draw every run of setting ``key`` in ``path`` (the quick ones or the others) into its PNG."""
    runs = [run for run in json.loads(path.read_text())[key]["runs"] if bool(run.get("quick")) == quick]
    plot(runs, path.with_suffix(".png"), key)


def run_label(name: str, run: dict[str, Any]) -> str:
    """A curve's legend label: the variant and its batch size, and "stopped" for a run that did not finish."""
    settings = run["settings"]
    batch = (f"{settings['chats_per_update']} chats" if name == EXPERT else
             f"{settings['calls_per_update']} calls")
    return f"{name} ({batch}/update{'' if run.get('finished', True) else ', stopped'})"


def commonest_share(types: list[str]) -> float:
    """The share of the commonest value in ``types``: what a constant guess of the commonest real type gets
    right."""
    return max(Counter(types).values()) / len(types)


def plot(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Type accuracy (read exactly, and by nearest template where measured) and closed share against updates,
    one colour per curve of every run in ``runs``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 3.9))
    for run in runs:
        for name, curve in run["curves"].items():
            label, updates = run_label(name, run), [row["update"] for row in curve]
            line, = ax.plot(updates, [row["type_accuracy"] for row in curve], marker="o",
                            label=f"{label}: type right")
            if all("nearest_type_accuracy" in row for row in curve):
                ax.plot(updates, [row["nearest_type_accuracy"] for row in curve], marker="x", linestyle=":",
                        color=line.get_color(), label=f"{label}: type right, nearest template")
            ax.plot(updates, [row["closed"] for row in curve], linestyle="--", color=line.get_color(),
                    label=f"{label}: closed with <|/csr|>")
            if curve and "replies" in curve[-1]:  # the share a constant guess of the commonest type gets right
                share = curve[-1].get("commonest_type_share")  # recorded since; computed from the replies before
                if share is None:
                    share = commonest_share([reply["real_type"] for reply in curve[-1]["replies"]])
                ax.axhline(share, color=line.get_color(), linewidth=0.8, alpha=0.5,
                           label=f"{label}: commonest real type's share")
    ax.set_xlabel("world-model updates")
    ax.set_ylabel("share of held-out replies")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
