"""CSRPhone-v1 rollout speed of ``HFEngine``: whole multi-turn episodes per second, with and without keeping
each episode's KV cache across turns (``reuse_kv_cache``), or (``--compare retire``, KV reuse on) with and
without dropping rows that stopped from the batch (``retire_stopped_rows``), or (``--compare dtype``, both
options on) in float32 and then bfloat16 (frozen weights stored in bf16, forwards under autocast, bf16 KV), or
(``--compare attention``, bf16, both options on) with the flash kernel and another decode attention
(``--kernel``: the compiled one or the native C++ one), or (``--compare merge``, bf16, the native decode attention)
with and without the LoRA layers merged for generation (``merge_lora``), or (``--compare prefill``, bf16, the
native decode attention, LoRA layers merged) with each turn's prefill attention computed by ``sdpa``
(``decode_attention="native-decode"``) and by the native flash attention (``"native"``), or (``--compare
allocator``, the preset's bf16 engine, one difficulty and batch size) with malloc's heap, its free pages given
back after every ``collect`` call (``release_free_heap``, the trainers' ``cpu_release_heap``), and then with every
block of 1 MB or more mapped on its own (``map_large_allocations``, their ``cpu_mmap_threshold``; it cannot be
undone within a process, so it runs second), or (``--compare heap``, the same engine, one difficulty and batch
size, the free heap released after every ``collect`` call both times) with glibc trimming its heap by itself and
then without (``hold_free_heap``; it too runs second).

For every difficulty, batch size (episodes run together in one ``RolloutCollector.collect`` call) and the
compared option off / on, the same seeds are played to the end (16 turns at most, the env's own limit), greedily
or, with ``--temperature``, sampled with the same seeds. Reported:
  * ``episodes_per_s``: episodes divided by the wall time of all the ``collect`` calls,
  * ``episode_seconds``: the mean wall time from an episode's start to its end (its batch's ``collect`` call),
  * ``positions_per_episode``: token positions the model ran (prefill and decoding, padding included), the
    work KV reuse removes, and ``model_tokens_per_episode`` / ``turns_per_episode``,
  * ``same_episodes``: whether the option on gave exactly the token ids of it off for the same seeds.
CPU seconds (``system_s`` of them in the kernel), minor page faults and the load average are recorded too (the
machine's cores may be shared with other jobs).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/csr_rollout_speed.py --model tiny --episodes 4
    OMP_WAIT_POLICY=PASSIVE python benchmarks/csr_rollout_speed.py --model smollm2-135m --warm-start
    OMP_WAIT_POLICY=PASSIVE python benchmarks/csr_rollout_speed.py --model smollm2-135m --adapter runs/x/adapter
    OMP_WAIT_POLICY=PASSIVE python benchmarks/csr_rollout_speed.py --model smollm2-135m --warm-start \
        --compare retire --difficulties 3 --batch-sizes 16
    OMP_WAIT_POLICY=PASSIVE python benchmarks/csr_rollout_speed.py --model smollm2-135m --warm-start \
        --compare dtype --difficulties 3 --batch-sizes 16 --threads 1
    OMP_WAIT_POLICY=PASSIVE python benchmarks/csr_rollout_speed.py --quick   # 2 episodes, d1, batch 2

Writes ``csr_rollout_speed.json`` (``csr_rollout_speed_<model>.json`` for another model, e.g. ``_smollm2``;
``csr_rollout_speed_retire[_<model>].json`` for ``--compare retire``, ``..._dtype...`` for ``--compare dtype``,
``..._attention...`` for ``--compare attention`` with the compiled kernel, ``..._attention_native...`` with
the native one, ``..._merge...``, ``..._prefill...``, ``..._allocator...`` and ``..._heap...`` for those
comparisons, with ``_T<temperature>`` for sampled episodes;
``diverging_episodes`` counts the seeds whose token ids differ between the two runs) to ``benchmarks/results/``
(``--results-dir``).

``--model tiny`` is a randomly initialised tiny Qwen3 with a tokenizer trained on the env's text (quick, for
checking the machinery); ``--model smollm2-135m`` is SmolLM2-135M-Instruct (``make smollm2``), optionally with
a PEFT adapter on top (``--adapter``: one trained on the plain model) or as the CSR policy's warm start
(``--warm-start``: the preset's SFT, with the library's added special tokens; cached, shipped or trained).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.grpo.presets import grpo_presets
from worldgym.agents.llm.allocator import hold_free_heap, map_large_allocations, release_free_heap
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.rollout import Episode, RolloutCollector
from worldgym.precision import cast_for_training

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import model_ready, portable, results_dir, results_parser, write_json

PRESETS = grpo_presets("CSRPhone-v1")  # the CSR presets, per model

MAX_TURNS = 16
# the engine option each comparison turns off and on, over the engine settings both runs share
COMPARED: dict[str, tuple[str, dict[str, bool]]] = {
    "kv_reuse": ("reuse_kv_cache", {"retire_stopped_rows": True}),
    "retire": ("retire_stopped_rows", {"reuse_kv_cache": True}),
    "dtype": ("bfloat16", {"reuse_kv_cache": True, "retire_stopped_rows": True}),  # off: float32
    # bf16 both times; off: the flash kernel, on: the decode attention --kernel names
    "attention": ("decode_attention", {"reuse_kv_cache": True, "retire_stopped_rows": True}),
    # bf16 both times, with the native decode attention
    "merge": ("merge_lora", {"reuse_kv_cache": True, "retire_stopped_rows": True, "decode_attention": "native"}),
    # bf16 both times, LoRA merged, the native decode kernel; off: prefill with sdpa ("native-decode"), on: with the
    # native flash attention ("native")
    "prefill": ("decode_attention", {"reuse_kv_cache": True, "retire_stopped_rows": True, "merge_lora": True}),
    # bf16, the SmolLM2 preset's engine; off: malloc's heap released after every collect call, on: large blocks mapped
    "allocator": ("map_large_allocations", {"reuse_kv_cache": True, "retire_stopped_rows": True, "merge_lora": True,
                                            "decode_attention": "native"}),
    # the same engine, the heap released after every collect call; off: glibc trims it by itself, on: it does not
    "heap": ("hold_free_heap", {"reuse_kv_cache": True, "retire_stopped_rows": True, "merge_lora": True,
                                "decode_attention": "native"}),
}
BF16_COMPARISONS = ("attention", "merge", "prefill", "allocator", "heap")
# malloc settings that cannot be undone within a process: the setting is applied before the second run
MALLOC_SETTINGS = {"allocator": map_large_allocations, "heap": hold_free_heap}
# each malloc comparison's runs, off and on, as the results name them
MALLOC_LABELS = {"allocator": ("released", "mapped"), "heap": ("trimmed", "held")}


@dataclass
class Run:
    """One configuration's episodes and timings."""

    episodes: list[Episode]
    wall_s: float
    cpu_s: float
    episode_seconds: float
    positions: int
    system_s: float = 0.0  # of cpu_s, the kernel's (page faults, mostly)
    page_faults: int = 0  # minor faults: pages the process touched for the first time since they were mapped


def make_env_factory(difficulty: int) -> Callable[[], gym.Env]:
    """CSRPhone-v1 at one difficulty, its tool calls parsed from the reply text."""
    return lambda: make_text_env("CSRPhone-v1", {"difficulty": difficulty})


def load_model(name: str, adapter: Path | None, seed: int,
               warm_start: bool = False) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The benchmarked model (in eval mode; a PEFT adapter on top, or the CSR preset's warm start, if asked) and
    its chat tokenizer."""
    if warm_start:
        from worldgym.agents.llm.warm_start import load_or_train_warm_start

        loaded = load_or_train_warm_start(PRESETS[name].warm_start)
        return loaded.model.eval(), loaded.tokenizer
    from worldgym.agents.llm import build_or_load_chat_model, env_text_corpus

    chat = build_or_load_chat_model(name, lambda: env_text_corpus(make_env_factory(1)), seed=seed)
    model, tokenizer = chat.model, chat.tokenizer
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    return model.eval(), tokenizer


class PositionCounter:
    """Counts the token positions a model runs, at its input embedding (prefill and every decoding step)."""

    def __init__(self, model: PreTrainedModel):
        self.count = 0
        model.get_input_embeddings().register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        self.count += inputs[0].numel()


def run(collector: RolloutCollector, counter: PositionCounter, seeds: list[int], batch: int,
        params: SamplingParams, release_heap: bool = False) -> Run:
    """Play ``seeds`` in consecutive batches of ``batch`` episodes; time every ``collect`` call (and, with
    ``release_heap``, the release of malloc's free heap after it)."""
    episodes: list[Episode] = []
    wall = cpu = latency = 0.0
    counter.count = 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    for start in range(0, len(seeds), batch):
        chunk = seeds[start : start + batch]
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        episodes += collector.collect(chunk, 1, params)
        if release_heap:
            release_free_heap()
        seconds = time.perf_counter() - wall_start
        wall, cpu, latency = wall + seconds, cpu + time.process_time() - cpu_start, latency + seconds * len(chunk)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return Run(episodes, wall, cpu, latency / len(seeds), counter.count, after.ru_stime - usage.ru_stime,
               after.ru_minflt - usage.ru_minflt)


def summarise(result: Run) -> dict[str, float]:
    """Per-episode figures of one configuration."""
    episodes = result.episodes
    count = len(episodes)
    return {
        "episodes": count,
        "episodes_per_s": count / result.wall_s,
        "episode_seconds": result.episode_seconds,
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "system_s": result.system_s,
        "page_faults": result.page_faults,
        "positions_per_episode": result.positions / count,
        "model_tokens_per_episode": sum(e.num_model_tokens for e in episodes) / count,
        "episode_tokens": sum(len(e.token_ids) for e in episodes) / count,
        "turns_per_episode": sum(len(e.turns) for e in episodes) / count,
        "success_rate": sum(e.success for e in episodes) / count,
    }


def same_episodes(a: list[Episode], b: list[Episode]) -> tuple[int, float]:
    """How many episodes of two runs differ in their token ids, and the largest logprob difference among those
    that do not."""
    diverging = sum(x.token_ids != y.token_ids for x, y in zip(a, b, strict=True))
    gaps = [abs(p - q) for x, y in zip(a, b) if x.token_ids == y.token_ids
            for p, q in zip(x.old_logprobs, y.old_logprobs)]
    return diverging, max(gaps, default=0.0)


def engine_settings(compare: str, on: bool, model: PreTrainedModel, kernel: str = "compiled") -> dict[str, Any]:
    """The engine options of one run of the comparison; for ``dtype`` the engine's compute dtype, and
    ``model``'s weights (all frozen here) are cast to it in place (float32 off, bfloat16 on); for
    ``attention`` the decode attention (the flash kernel off, ``kernel`` on)."""
    option, shared = COMPARED[compare]
    if compare in BF16_COMPARISONS:
        cast_for_training(model.requires_grad_(False), torch.bfloat16)
        if compare in MALLOC_SETTINGS:
            return {**shared, "dtype": torch.bfloat16}
        setting = {"attention": kernel if on else "flash", "prefill": "native" if on else "native-decode"}.get(compare, on)
        return {**shared, option: setting, "dtype": torch.bfloat16}
    if compare != "dtype":
        return {**shared, option: on}
    dtype = torch.bfloat16 if on else torch.float32
    cast_for_training(model.requires_grad_(False), dtype)
    return {**shared, "dtype": dtype}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--model", default="tiny", help="'tiny' or 'smollm2-135m'")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--adapter", type=Path, default=None, help="a PEFT adapter folder to load on top")
    source.add_argument("--warm-start", action="store_true",
                        help="the model's CSR warm start (runs/warm_starts, or shipped with the package)")
    parser.add_argument("--compare", choices=list(COMPARED), default="kv_reuse",
                        help="the engine option timed off vs on (retire: with KV reuse on both times)")
    parser.add_argument("--kernel", choices=["compiled", "native"], default="compiled",
                        help="with --compare attention: the decode attention timed against the flash kernel")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per configuration")
    parser.add_argument("--difficulties", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--max-new-tokens", type=int, default=PRESETS["tiny"].max_new_tokens,
                        help="tokens per reply at most (default: the CSR presets')")
    parser.add_argument("--max-episode-tokens", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0, help="first env seed (and the tiny model's seed)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sampling temperature of the episodes (0: greedy; the same seeds either way)")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.difficulties, args.batch_sizes, args.max_new_tokens = 2, [1], [2], 8
    if args.episodes < 1 or min(args.batch_sizes) < 1:
        parser.error("--episodes and --batch-sizes must be >= 1")
    if args.compare in MALLOC_SETTINGS and len(args.difficulties) * len(args.batch_sizes) > 1:
        parser.error(f"--compare {args.compare}: one difficulty and one batch size (malloc's setting cannot be undone "
                     "in a process)")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run every configuration, print a table and write JSON (``None`` when the model is not installed)."""
    args = parse_args(argv)
    if not model_ready(args):
        return None
    model, tokenizer = load_model(args.model, args.adapter, args.seed, args.warm_start)
    counter = PositionCounter(model)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed)
    seeds = list(range(args.seed, args.seed + args.episodes))
    results: dict[str, Any] = {
        "env": "CSRPhone-v1 (ParseToolCall), " + (f"sampled at temperature {args.temperature:g}" if args.temperature
                                                  else "greedy"),
        "model": args.model,
        "adapter": portable(args.adapter) if args.adapter else None,
        "warm_start": PRESETS[args.model].warm_start.key() if args.warm_start else None,
        "quick": args.quick,
        "compare": args.compare,
        "settings": {k: getattr(args, k) for k in
                     ("episodes", "difficulties", "batch_sizes", "max_new_tokens", "max_episode_tokens", "seed",
                      "threads", "temperature")} | {"max_turns": MAX_TURNS},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
        "runs": [],
    }
    shared = COMPARED[args.compare][1]
    header = (f"{'difficulty':>10} {'batch':>5} {args.compare:>8} {'episodes/s':>10} {'s/episode':>9} "
              f"{'positions/ep':>12} {'turns/ep':>8} {'same':>5}")
    print(header)
    for difficulty in args.difficulties:
        for batch in args.batch_sizes:
            runs: dict[bool, Run] = {}
            for on in (False, True):
                setting = MALLOC_SETTINGS.get(args.compare)
                if setting is not None and on and not setting():
                    raise SystemExit(f"{setting.__name__} is not available here (needs glibc on Linux)")
                engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=batch,
                                  kv_cache_max_tokens=batch * args.max_episode_tokens,
                                  **engine_settings(args.compare, on, model, args.kernel))
                collector = RolloutCollector(engine, tokenizer, make_env_factory(difficulty), max_turns=MAX_TURNS,
                                             max_episode_tokens=args.max_episode_tokens)
                # warm-up (two tasks: prompts of two lengths, a padded batch, as compiled kernels see them)
                collector.collect(seeds[:2], 1, SamplingParams(temperature=0.0, max_new_tokens=2))
                engine.clear_kv_cache()
                runs[on] = run(collector, counter, seeds, batch, params,
                               release_heap=(args.compare == "allocator" and not on) or args.compare == "heap")
            diverging, logprob_gap = same_episodes(runs[False].episodes, runs[True].episodes)
            identical = diverging == 0
            for on, result in runs.items():
                figures = summarise(result)
                settings = {"kv_reuse": shared.get("reuse_kv_cache", on),
                            "retire": shared.get("retire_stopped_rows", on)}
                if args.compare == "dtype":
                    settings["dtype"] = "bfloat16" if on else "float32"
                if args.compare == "attention":
                    settings |= {"dtype": "bfloat16", "attention": args.kernel if on else "flash"}
                if args.compare == "merge":
                    settings |= {"dtype": "bfloat16", "attention": "native", "merge_lora": on}
                if args.compare == "prefill":
                    settings |= {"dtype": "bfloat16", "attention": "native" if on else "native-decode",
                                 "merge_lora": True}
                if args.compare in MALLOC_LABELS:
                    settings |= {"dtype": "bfloat16", "attention": "native", "merge_lora": True,
                                 "malloc": MALLOC_LABELS[args.compare][on]}
                results["runs"].append({"difficulty": difficulty, "batch": batch, **settings, **figures,
                                        "same_episodes": identical, "diverging_episodes": diverging,
                                        "max_logprob_gap": logprob_gap})
                print(f"{difficulty:>10} {batch:>5} {'on' if on else 'off':>8} "
                      f"{figures['episodes_per_s']:>10.3f} {figures['episode_seconds']:>9.2f} "
                      f"{figures['positions_per_episode']:>12,.0f} {figures['turns_per_episode']:>8.1f} "
                      f"{'yes' if identical else 'NO':>5}")
            speedup = runs[False].wall_s / runs[True].wall_s
            print(f"{'':>10} {'':>5} speed-up with {args.compare}: {speedup:.2f}x "
                  f"(max logprob gap {logprob_gap:.1e})")
    results["load_average_after"] = os.getloadavg()[0]
    name = ("csr_rollout_speed" + ("" if args.compare == "kv_reuse" else "_" + args.compare)
            + ("_native" if args.compare == "attention" and args.kernel == "native" else "")
            + (f"_T{args.temperature:g}" if args.temperature else "")
            + ("" if args.model == "tiny" else "_" + args.model.split("-")[0]))
    write_json(results_dir(args) / f"{name}.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
