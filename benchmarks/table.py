"""The benchmark tables, written from the results JSON only so that their figures and text cannot drift.

:func:`render` reads ``<results>/*.json`` and returns the full markdown table (the docs' benchmarks page);
:func:`render_summary` returns the README's short one, a headline per benchmark (each row marked ``in_summary``)
and a link to the docs page that tells the rest. :func:`replace_table` puts a table between a file's
``<!-- benchmark-table:start -->`` and ``<!-- benchmark-table:end -->`` markers. Each row is one function of the
JSON it reads; a row whose file is missing says so instead of showing a figure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from benchmarks.common import portable
from worldgym.machine import isa_label

START = "<!-- benchmark-table:start -->"
END = "<!-- benchmark-table:end -->"
HEADER = "| script | measures | machine | result (CPU) |\n|---|---|---|---|"
SUMMARY_HEADER = "| benchmark | machine | headline (CPU) | details |\n|---|---|---|---|"

Results = dict[str, Any]


@dataclass(frozen=True)
class Row:
    """One line of the table: what it runs and measures, the results files it reads, how it says them."""

    script: str
    measures: str
    files: tuple[str, ...]
    describe: Callable[..., str]  # one argument per file (None for a missing optional file)
    optional: tuple[str, ...] = ()  # files the row reads when present
    headline: Callable[..., str] | None = None  # the README's short cell, from the required files
    page: str = "results/benchmarks.md"  # the docs page (under docs/) that tells the rest
    in_summary: bool = True  # False: on the docs page's full table only, not in the README's short one


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _span(values: Iterable[float], fmt: Callable[[float], str] = "{:.2f}".format, unit: str = "") -> str:
    """``low-high`` (or one value when they are equal) in ``fmt``, then ``unit``."""
    ordered = sorted(values)
    low, high = fmt(ordered[0]), fmt(ordered[-1])
    return (low if low == high else f"{low}-{high}") + unit


def _pct_span(values: Iterable[float]) -> str:
    return _span([100 * v for v in values], "{:.1f}".format, "%")


def _pcts(success: dict[str, float]) -> str:
    """Success by difficulty: ``18.3 / 3.2 / 0.0% at d1/d2/d3``."""
    shown = " / ".join(f"{100 * v:.1f}" for v in success.values())
    return f"{shown}% at {'/'.join(f'd{d}' for d in success)}"


def _k(steps: float) -> str:
    return f"{steps / 1000:.1f}k"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _csr_env_throughput(data: Results) -> str:
    expert, random, sampled = (data["policies"][name] for name in ("expert", "random", "sampled_calls"))
    goal = "met" if data["goal_met_wall"] else "NOT met"
    return (f"expert: {expert['env_steps_per_s']:,.0f} env steps/s ({expert['loop_steps_per_s']:,.0f} incl. the "
            f"policy; goal {data['goal_env_steps_per_s']:,} {goal}); random policy {random['env_steps_per_s']:,.0f}; "
            f"uniformly sampled calls {sampled['env_steps_per_s']:,.0f} (load {data['load_average_before']:.1f})")


def _gameboy(data: Results) -> str:
    def ratios(rom: str) -> str:
        rows = data["roms"][rom]["warp"]
        ns = [row["num_envs"] for row in rows]
        return f"{_span([row['ratio_to_pyboy'] for row in rows], unit='x')} PyBoy (N = {min(ns)}..{max(ns)})"

    compile_s = ("compile not timed" if data["cold_compile_s"] is None else
                 f"cold kernel compile {data['cold_compile_s']:.1f} s, warm {data['warm_compile_s']:.2f} s")
    return (f"halting game-like ROM {ratios('sprite_goal')}; CPU-bound busy loop {ratios('busy_loop')}; "
            f"{compile_s} (device {data['device']})")


def _ztoken_ppo(data: Results) -> str:
    summary = data["summary"]

    def exact(stage: str) -> str:
        return f"{summary[f'{stage}/exact_match']['mean']:.3f}"

    every = "in every seed" if summary["ppo_beats_warm_start_every_seed"] else "NOT in every seed"
    return (f"{exact('warm_start')} -> {exact('ppo')} over {_plural(len(data['runs']), 'seed')} (PPO beats its warm start "
            f"{every}); SB3 MLP PPO {exact('sb3')}; a supervised control with the same budget reaches "
            f"{exact('supervised_control')}")


def _dreamer_speed_bf16(row: Results) -> str:
    """`` bf16 ...`` figures of a ``speed`` row timed in bfloat16 too (empty otherwise)."""
    bf16 = row.get("dtypes", {}).get("bfloat16")
    if bf16 is None:
        return ""
    text = (f"; bf16 {bf16['cpu_s_per_step']:.2f} CPU s/step ({bf16['cpu_ratio_to_float32']:.2f}x float32's "
            f"{row['cpu_s_per_step']:.2f}")
    if bf16.get("sheeprl_cpu_s_per_step"):
        text += (f"), **{bf16['cpu_speedup']:.2f}x** faster than sheeprl bf16-mixed's "
                 f"{bf16['sheeprl_cpu_s_per_step']:.2f} (wall {bf16['speedup']:.2f}x")
    return text + ")"


def _dreamer_speed(data: Results) -> str:
    parts = []
    for row in data["rows"]:
        ours = f"{row['size']}: {row['cpu_s_per_step']:.2f} CPU s/step ({row['s_per_step']:.2f} s wall)"
        if row.get("sheeprl_cpu_s_per_step"):
            ours = (f"{row['size']}: {row['cpu_s_per_step']:.2f} vs {row['sheeprl_cpu_s_per_step']:.2f} CPU s/step: "
                    f"**{row['cpu_speedup']:.2f}x** faster than sheeprl (wall {row['s_per_step']:.2f} vs "
                    f"{row['sheeprl_s_per_step']:.2f} s, {row['speedup']:.2f}x)")
        parts.append(ours + _dreamer_speed_bf16(row))
    if not any(row.get("sheeprl_cpu_s_per_step") for row in data["rows"]):
        parts.append("no sheeprl figure: `benchmarks/sheeprl_dreamer_step.py` has not run")
    return "; ".join(parts)


def _dreamer_ratio(data: Results) -> str:
    rows = data["rows"]
    actual = " / ".join(f"{row['actual']:.3f}" for row in rows)
    target = " / ".join(f"{row['target']:g}" for row in rows)
    worst = max(row["relative_error"] for row in rows)
    return f"{actual} for {target} (at most {_pct(worst)} off, {data['max_steps']:,} env steps each)"


def _dreamer_cartpole(data: Results) -> str:
    runs = {agent: sorted((r for r in data["runs"] if r["agent"] == agent), key=lambda r: r["seed"])
            for agent in ("dreamer", "ppo")}
    if any(r["solved_at"] is None for rs in runs.values() for r in rs):
        solved = ", ".join(f"{agent} {data[f'{agent}_solved_runs']}" for agent in runs)
        return f"solved within {data['max_steps']:,} env steps: {solved}"
    steps = {agent: [r["solved_at"] for r in rs] for agent, rs in runs.items()}
    model = runs["dreamer"][0]["settings"]["model"]
    optim = runs["dreamer"][0]["settings"]["optim"]
    wins = sum(d < p for d, p in zip(steps["dreamer"], steps["ppo"], strict=True))
    verdict = "fewer env steps in every seed" if wins == len(steps["ppo"]) else f"fewer env steps in {wins} seeds"
    seeds = " / ".join(str(r["seed"]) for r in runs["dreamer"])
    dreamer_mean, ppo_mean = mean(steps["dreamer"]), mean(steps["ppo"])
    return (f"Dreamer (recurrent {model['recurrent_size']}, {model['stochastic_size']}x{model['discrete_size']} "
            f"latents, actor/critic lr {optim.get('actor_learning_rate', optim.get('actor_lr')):.0e}".replace("e-0", "e-") + ", replay ratio "
            f"{runs['dreamer'][0]['settings']['replay_ratio']:g}) **{' / '.join(_k(s) for s in steps['dreamer'])}** "
            f"vs PPO {' / '.join(_k(s) for s in steps['ppo'])} for seeds {seeds}: {verdict} (mean "
            f"{_k(dreamer_mean)} vs {_k(ppo_mean)}, {dreamer_mean / ppo_mean:.2f}x); wall time "
            f"~{mean(r['wall_s'] for r in runs['dreamer']) / 60:.0f} min vs "
            f"~{mean(r['wall_s'] for r in runs['ppo']):.0f} s per run")


def _intervals_overlap(row: Results, dapo: Results) -> bool:
    """Whether a mode's and DAPO's bootstrap 95% intervals of final success overlap (False where either has none)."""
    mode_ci, dapo_ci = row.get("final_success_ci95"), dapo.get("final_success_ci95")
    return bool(mode_ci and dapo_ci) and mode_ci[0] <= dapo_ci[1] and dapo_ci[0] <= mode_ci[1]


def _csr_dual_lora(data: Results, demo: Results | None) -> str:
    parts = []
    for key, rows in data["runs"].items():
        dapo = rows.get("dapo")
        seeds = max(len(row["seeds"]) for row in rows.values())
        modes, unfinished = [], False
        for mode, row in rows.items():
            notes = [] if len(row["seeds"]) == seeds else [_plural(len(row["seeds"]), "seed")]
            done, total = min(row.get("steps_done", [0])), max(row.get("steps", [0]))
            if done < total:  # a run still going: its last validation so far, not its final one
                notes.append(f"after {done} of {total} steps")
                unfinished = True
            modes.append(f"{'DAPO' if mode == 'dapo' else mode} {_pct_span(row['final_success'])}"
                         + (f" ({', '.join(notes)})" if notes else ""))
        verdict = ""
        if unfinished:
            verdict = "; runs unfinished"
        elif dapo is not None and len(rows) == 1:
            verdict = "; no other mode finished yet"
        elif dapo is not None:
            better = [m for m, row in rows.items() if m != "dapo"
                      and row["final_success_mean"] > dapo["final_success_mean"]]
            overlapping = [m for m in better if _intervals_overlap(rows[m], dapo)]
            apart = [m for m in better if m not in overlapping]
            notes = ([f"beat DAPO on the mean: {', '.join(apart)}"] if apart else []) + (
                [f"above DAPO on the mean, their 95% intervals overlapping: {', '.join(overlapping)}"]
                if overlapping else [])
            verdict = "; " + "; ".join(notes) if notes else "; no mode beats DAPO"
        parts.append(f"{key} ({_plural(seeds, 'seed')}), last validation success: {', '.join(modes)}{verdict}")
    text = "; ".join(parts)
    if demo is not None and not demo["quick"]:
        (_, first), (_, last) = demo["success"][0], demo["success"][-1]
        text += (f"; `make demo` {demo['seconds'] / 60:.1f} min on {demo['cores']} cores, validation "
                 f"{first:.1%} -> {last:.1%}")
    return text + "; see the dual-LoRA results"


def _grpo_vs_trl(data: Results, bf16: Results | None = None) -> str:
    """One comparison (``worldgym``/``trl`` at the top), or one per setting and finetune mode (``settings``);
    then the same in bf16 where that file exists."""
    if "settings" not in data:
        return _grpo_comparison(data, data["warm_start_success"])
    text = "; ".join(
        f"{name} ({entry['setting']['model_size']}, {mode}): "
        f"{_grpo_comparison(entry[mode], entry['warm_start_success'])}"
        for name, entry in data["settings"].items() for mode in ("full", "lora") if mode in entry)
    return text if bf16 is None else f"{text}. Both in bf16: {_grpo_vs_trl(bf16)}"


def _grpo_comparison(run: Results, warm_start_success: float) -> str:
    ours, trl = run["worldgym"], run["trl"]
    per_cpu = f", {run['tokens_per_cpu_s_ratio']:.2f}x per CPU-s" if "tokens_per_cpu_s_ratio" in run else ""
    return (f"{ours['tokens_per_s']:,.0f} vs {trl['tokens_per_s']:,.0f} tokens/s (**{run['tokens_per_s_ratio']:.2f}x**"
            f"{per_cpu}), success {ours['eval_success']:.2f} vs {trl['eval_success']:.2f} (warm start "
            f"{warm_start_success:.2f}); without prompt sharing {run['tokens_per_s_ratio_no_prompt_sharing']:.2f}x")


def _csr_policy(data: Results) -> str:
    parts = []
    if "random_copy" in data:
        parts.append(f"copying random baseline {_pcts(data['random_copy'])}")
    for model, entry in data.items():
        if not isinstance(entry, dict) or not ({"warm_start", "dapo"} & entry.keys()):
            continue
        parts += _csr_policy_entry(model, entry)
        for label, other in entry.get("other_warm_starts", {}).items():
            parts += _csr_policy_entry(f"{model} [warm start {label}]", other)
    return "; ".join(parts)


def _csr_policy_entry(name: str, entry: Results) -> list[str]:
    """A CSR policy's warm-start success and its DAPO runs, for one model and warm start."""
    parts = [f"{name} warm start ({decoding}) {_pcts(ws['success'])}"
             for decoding, ws in entry.get("warm_start", {}).items()]
    for decoding, runs in entry.get("dapo", {}).items():
        for difficulty, row in runs["success"].items():
            temperatures = row.get("temperatures", [1.0])
            at = "" if temperatures == [1.0] else ", T " + "/".join(f"{t:g}" for t in temperatures)
            parts.append(f"{name} DAPO ({decoding}, d{difficulty}{at}, {_plural(len(row['seeds']), 'seed')}"
                         f"{_stopped_runs(row)}) {_pct_span(row['start'])} -> {_pct_span(row['seeds'])}")
    return parts


def _stopped_runs(row: Results) -> str:
    """``"; seed 2 stopped at step 12 of 24"`` for the runs of a DAPO row that did not reach their last step."""
    done, planned = row.get("steps_done"), row.get("steps")
    if not done or not planned:
        return ""
    return "".join(f"; seed {seed} stopped at step {d} of {n}"
                   for seed, d, n in zip(row["seed_ids"], done, planned) if d < n)


def _csr_rollout_speed(tiny: Results, smollm2: Results | None, retire_smollm2: Results | None) -> str:
    def speedups(data: Results, option: str = "kv_reuse") -> str:
        pairs: dict[tuple[int, int], dict[bool, Results]] = {}
        for run in data["runs"]:
            pairs.setdefault((run["difficulty"], run["batch"]), {})[run[option]] = run
        shown = [f"d{d} batch {b}: {off['episodes_per_s']:.3g} -> {on['episodes_per_s']:.3g} episodes/s "
                 f"({off['wall_s'] / on['wall_s']:.2f}x)" for (d, b), (off, on) in
                 ((key, (pair[False], pair[True])) for key, pair in sorted(pairs.items()))]
        same = "identical episodes" if all(r["same_episodes"] for r in data["runs"]) else "episodes DIFFER"
        return f"{', '.join(shown)}; {same}"

    text = f"tiny random model: {speedups(tiny)}"
    if smollm2 is not None:
        adapter = " + LoRA" if smollm2["adapter"] or smollm2.get("warm_start") else ""
        text = f"SmolLM2{adapter}: {speedups(smollm2)}; {text}"
    text = "KV cache kept across turns vs re-read: " + text
    if retire_smollm2 is not None:
        text += f". Rows that stopped leave the batch (KV reuse on), SmolLM2 warm start: {speedups(retire_smollm2, 'retire')}"
    return text


def _kv_cache_growth(data: Results) -> str:
    runs = ", ".join(f"{run['cached_tokens']:,} cached tokens {run['median_s']['concatenating']:.1f} vs "
                     f"{run['median_s']['growing']:.1f} s (**{run['speedup_median']:.2f}x**)" for run in data["runs"])
    same = "same tokens" if all(run["same_tokens"] for run in data["runs"]) else "tokens DIFFER"
    return (f"{data['model']}, {data['batch']} rows x {data['new_tokens']} new tokens, {data['threads']} thread: "
            f"{runs}; {same}")


def _cpu_allocator_memory(data: Results) -> str:
    median = data["median"]
    same = "same loss" if data["same_loss"] else "loss DIFFERS"
    return (f"{data['model']}, {data['calls']} calls x {data['tokens']:,} tokens, {data['threads']} thread: peak "
            f"{median['default']['peak_above_loaded_gb']:.2f} GB above the loaded model by default vs "
            f"{median['mapped']['peak_above_loaded_gb']:.2f} GB mapped (**{data['peak_ratio_default_to_mapped']:.1f}x**"
            f"), {median['default']['seconds']:.0f} vs {median['mapped']['seconds']:.0f} s; {same}")


def _cartridge_drop(key: str, row: dict[str, Any], seeds: int) -> str:
    """One run's held-out KL drop, with its seed count where it differs from the model's, and a warning where
    the cartridge ends worse than no documents (a drop from a random start can be large and still mean that)."""
    notes = [] if len(row["seeds"]) == seeds else [_plural(len(row["seeds"]), "seed")]
    worse = [last / none for last, none in zip(row["kl_last"], row["kl_none"], strict=True) if last > none]
    if worse:
        notes.append(f"ends {max(worse):.1f}x above the KL without documents")
    return f"{key.replace('_', '-')} {_pct_span(row['kl_drop'])}" + (f" ({'; '.join(notes)})" if notes else "")


def _cartridge(data: Results) -> str:
    parts = []
    for model, entry in data["models"].items():
        runs, budget = entry["runs"], entry["budget"]
        seeds = max(len(row["seeds"]) for row in runs.values())
        drops = ", ".join(_cartridge_drop(key, row, seeds) for key, row in runs.items())
        memory = next(iter(runs.values()))["memory_ratio"]
        text = (f"{model} ({_plural(seeds, 'seed')}, {budget['num_steps']} steps, {memory:.0f}x less KV than the "
                f"documents), held-out KL drop: {drops}")
        if entry["accuracy_meaningful"]:
            text += "; recovery " + ", ".join(
                f"{key} {'n/a' if row['recovery_of_means'] is None else _pct(row['recovery_of_means'])}"
                for key, row in runs.items())
        else:
            text += "; accuracy not meaningful (the teacher does not read)"
        parts.append(text)
    for model, teacher in data.get("teachers", {}).items():
        accuracy = teacher["accuracy"]
        parts.append(f"teacher {model}: greedy held-out accuracy {_pct(accuracy['held_out_documents'])} with the "
                     f"documents, {_pct(accuracy['held_out_none'])} without, {_pct(accuracy['train_documents'])} on "
                     f"its warm-up's questions ({teacher['questions']['held_out_documents']} questions each, chance "
                     f"{_pct(teacher['chance'])})")
    return "; ".join(parts)


def _ray_scaleout(data: Results) -> str:
    results = data["results"]
    shown = ", ".join(f"{name} {row['steps_per_s']:.2f}" for name, row in results.items())
    return (f"GRPO steps/s on {data['machine']['cpus']} CPU cores, tiny model: {shown} (median of "
            f"{_plural(data['repeats'], 'repeat')}); async lag {results['ray-1-async']['policy_lag_mean']:.0f}")


def _fuzz_envs(data: Results) -> str:
    slowest = min(data["targets"], key=lambda name: data["targets"][name]["steps_per_s"])
    return (f"{data['total_steps']:,} fuzzed steps: {data['unhandled_exceptions']} unhandled exceptions, "
            f"{data['contract_violations']} contract violations ({data['steps_per_s_in_env']:,.0f} steps/s inside "
            f"the envs, {slowest} the slowest)")


def _llm_precision(data: Results) -> str:
    parts = []
    learner = data.get("learner")
    if learner:
        figures = learner["figures"]
        settings = learner["settings"]
        parts.append(f"LoRA fwd+bwd, {settings['rows']} x {settings['length']:,} tokens: "
                     f"{figures['float32']['tokens_per_s']:.0f} -> {figures['bfloat16']['tokens_per_s']:.0f} tokens/s "
                     f"(**{learner['bf16_speedup']:.2f}x**; loss {learner['loss_gap']:.0e} apart)")
    step = data.get("dapo_step")
    if step:
        times = ", ".join(f"{dtype} {row['time/step_s'] / 60:.1f} min (rollout {row['time/rollout_s'] / 60:.1f}, "
                          f"update {row['time/update_s'] / 60:.1f})" for dtype, row in step["figures"].items())
        parts.append(f"one DAPO step, {step['what'].split(', ', 1)[-1]}: {times}")
    sft = data.get("sft")
    if sft:
        success = "; ".join(f"{dtype} " + " / ".join(f"{_pct(row['success'])}" for row in by_d.values())
                            + f" at {'/'.join(by_d)}" for dtype, by_d in sft["validation"].items())
        parts.append(f"CSR warm-start SFT in bf16: {sft['sft_summary_seconds'] / 60:.1f} min; greedy "
                     f"validation {success}")
    return f"{data['model']}: " + "; ".join(parts)


def _fresh_clone(data: Results) -> str:
    shown = ", ".join(f"`make {target}` {row['minutes']:.1f} min" + (f" ({row['summary']})" if "summary" in row else "")
                      + ("" if row["returncode"] == 0 else " FAILED") for target, row in data["targets"].items())
    return f"{shown}; commit {data['commit'][:10]}"


def _short_fresh_clone(data: Results) -> str:
    return ", ".join(f"`make {target}` {row['minutes']:.1f} min" for target, row in data["targets"].items())


def _cpu_matmul_dtype(data: Results) -> str:
    def entry(row: Results) -> str:
        shown = ", ".join(f"{shape.split('_')[0]} {figures['gflops']['float32']:.0f} -> "
                          f"{figures['gflops']['bfloat16']:.1f} GFLOP/s (**{figures['bf16_vs_float32']:.2f}x**)"
                          for shape, figures in row["shapes"].items())
        return f"{isa_label(row['machine'])}: {shown}"

    return "float32 -> bf16, 1 thread: " + "; ".join(entry(row) for row in data["machines"].values())


def _short_cpu_matmul_dtype(data: Results) -> str:
    return "bf16 matmul vs float32: " + ", ".join(
        f"**{next(iter(row['shapes'].values()))['bf16_vs_float32']:.2f}x** on {isa_label(row['machine'])}"
        for row in data["machines"].values())


def _rollout_precision(data: Results) -> str:
    runs = {run["dtype"]: run for run in data["runs"]}
    full, half = runs["float32"], runs["bfloat16"]
    return (f"{data['model']} warm start, d{full['difficulty']}, {full['episodes']} greedy episodes at batch "
            f"{full['batch']}: {full['wall_s'] / full['episodes']:.1f} -> {half['wall_s'] / half['episodes']:.1f} s "
            f"per episode (**{full['wall_s'] / half['wall_s']:.2f}x**, CPU time {full['cpu_s'] / half['cpu_s']:.2f}x; "
            f"); success "
            f"{_pct(full['success_rate'])} vs {_pct(half['success_rate'])}; {half['diverging_episodes']} of "
            f"{half['episodes']} episodes diverge")


def _decode_attention(data: Results) -> str:
    step = data["whole_model_step"]
    bf16 = next(row for row in data["layers"] if row["dtype"] == "bfloat16" and row["positions"] == step["positions"])
    return (f"{step['rows']} rows x {step['positions']:,} cached positions, one layer in bf16 with a padding mask: "
            f"transformers' sdpa {bf16['mask']['hf_sdpa']:.1f} ms, the engine's {bf16['mask']['fast']:.1f} ms "
            f"(reading the KV once takes {bf16['mask']['read']:.1f} ms); whole {step['model']} step bf16 "
            f"{step['bfloat16']['sdpa']['mask']:.0f} -> {step['bfloat16']['fast']['mask']:.0f} ms")


def _precision_agents(data: Results) -> str:
    ppo = ", ".join(f"{name} ({row['parameters'] / 1e6:.1f}M) **{row['float32_over_bfloat16']['step_s']:.2f}x**"
                    for name, row in data["ztoken_ppo"].items())
    cartridge = ", ".join(f"{name} **{row['float32_over_bfloat16']['step_s']:.2f}x**"
                          for name, row in data["cartridge"].items())
    return f"float32 / bf16 step time: Z-token PPO {ppo}; cartridge distiller {cartridge}"

def _serve_load(data: Results, attack: Results | None = None) -> str:
    levels = ", ".join(f"{row['sessions']}: {row['steps_per_s']:,.0f} steps/s, p50 / p99 {row['p50_ms']:.1f} / "
                       f"{row['p99_ms']:.1f} ms" for row in data["closed_loop"])
    paced, leak, kill = data["paced"], data["leak_check"], data["server_kill"]
    return (f"sessions without pause {levels} (in-process {data['in_process']['steps_per_s']:,.0f} steps/s); "
            f"{paced['sessions']} sessions pausing {paced['think_ms']:g} ms: p99 {paced['p99_ms']:.1f} ms; "
            f"{leak['mib_per_session']:.2f} MiB per session; {leak['leaked_sessions']} of "
            f"{leak['sessions_opened']:,} dropped sessions leaked; kill: {kill['typed_errors']} / {kill['clients']} "
            f"clients got RemoteEnvError; goal {data['goals']['sessions_per_core']} sessions per core at p99 < "
            f"{data['goals']['p99_ms']:g} ms: {_serve_goal(data)} (load {data['load_average_before']:.1f}, "
            f"{data['cpu_count']} shared cores)" + ("" if attack is None else _serve_attack(attack)))


def _serve_attack(data: Results) -> str:
    met = {True: "met", False: "NOT met"}
    attack, fat = data["attack"], data["fat_sessions"]
    return (f"; beside an attacker ({', '.join(attack['kinds'])}) a good session's p99 {attack['alone']['p99_ms']:.1f}"
            f" -> {attack['attacked']['p99_ms']:.1f} ms ({attack['p99_ratio']:.2f}x, goal <= "
            f"{attack['goal_p99_ratio']:g}x {met[attack['goal_met']]}); after {fat['sessions']} fat sessions "
            f"closed, RSS {fat['growth_mb']:+.1f} MB over idle (goal <= {fat['goal_growth_mb']:g} MB "
            f"{met[fat['goal_met']]}; load {data['load_average_before']:.1f})")


def _serve_goal(data: Results) -> str:
    met = {True: "met", False: "NOT met"}
    return (f"no pause {met[data['goal_sessions_per_core_met_closed_loop']]}, "
            f"{data['paced']['think_ms']:g} ms pause {met[data['goal_sessions_per_core_met_paced']]}")


# The README's short cells: one headline figure each, from the same JSON as the full rows.

def _short_csr_env_throughput(data: Results) -> str:
    goal = "met" if data["goal_met_wall"] else "NOT met"
    return (f"{data['policies']['expert']['env_steps_per_s']:,.0f} env steps/s with the scripted expert "
            f"(goal {data['goal_env_steps_per_s']:,}: {goal})")


def _short_gameboy(data: Results) -> str:
    ratios = [row["ratio_to_pyboy"] for rom in data["roms"].values() for row in rom["warp"]]
    return f"{_span(ratios, unit='x')} PyBoy's frames/s for 1-256 emulators (device {data['device']})"


def _short_fuzz_envs(data: Results) -> str:
    return f"{data['total_steps']:,} hostile steps, {data['unhandled_exceptions']} unhandled exceptions"


def _short_ztoken_ppo(data: Results) -> str:
    summary = data["summary"]
    return (f"exact match {summary['warm_start/exact_match']['mean']:.3f} -> {summary['ppo/exact_match']['mean']:.3f} "
            f"({_plural(len(data['runs']), 'seed')}); SB3 PPO {summary['sb3/exact_match']['mean']:.3f}")


def _short_dreamer_speed(data: Results) -> str:
    compared = [row for row in data["rows"] if row.get("sheeprl_cpu_s_per_step")]
    if not compared:
        return "no sheeprl figure yet"
    return ", ".join(f"{row['size']} **{row['cpu_speedup']:.2f}x** faster than sheeprl per CPU-s" for row in compared)


def _short_dreamer_ratio(data: Results) -> str:
    return f"within {_pct(max(row['relative_error'] for row in data['rows']))} of the target replay ratio"


def _short_dreamer_cartpole(data: Results) -> str:
    steps = {agent: [r["solved_at"] for r in data["runs"] if r["agent"] == agent] for agent in ("dreamer", "ppo")}
    if any(s is None for runs in steps.values() for s in runs):
        return f"solved: dreamer {data['dreamer_solved_runs']}, ppo {data['ppo_solved_runs']}"
    return (f"return 475 after {_k(mean(steps['dreamer']))} env steps vs PPO's {_k(mean(steps['ppo']))} "
            f"(mean of {_plural(len(steps['ppo']), 'seed')})")


def _short_csr_policy(data: Results) -> str:
    parts = [f"d1 success: copying random {_pct(data['random_copy']['1'])}"] if "random_copy" in data else []
    for model, entry in data.items():
        if not isinstance(entry, dict):
            continue
        warm = [ws["success"]["1"] for ws in entry.get("warm_start", {}).values() if "1" in ws["success"]]
        dapo = [row["seeds"] for runs in entry.get("dapo", {}).values()
                for d, row in runs["success"].items() if d == "1"]
        if dapo:
            parts.append(f"{model} DAPO {_pct_span(dapo[0])}")
        elif warm:
            parts.append(f"{model} warm start {_pct(max(warm))}")
    return ", ".join(parts)


def _short_csr_dual_lora(data: Results) -> str:
    key, rows = max(data["runs"].items(), key=lambda item: max(len(row["seeds"]) for row in item[1].values()))
    best = max((m for m in rows if m != "dapo"), key=lambda m: rows[m]["final_success_mean"])
    return (f"{key}, final validation: DAPO {_pct_span(rows['dapo']['final_success'])}, {best} "
            f"{_pct_span(rows[best]['final_success'])} ({_plural(len(rows[best]['seeds']), 'seed')})")


def _short_csr_rollout_speed(tiny: Results) -> str:
    speedups = {}
    for run in tiny["runs"]:
        speedups.setdefault((run["difficulty"], run["batch"]), {})[run["kv_reuse"]] = run["wall_s"]
    ratios = [pair[False] / pair[True] for pair in speedups.values()]
    return f"keeping the KV cache across turns: {_span(ratios, unit='x')} episodes/s (tiny model)"


def _short_kv_cache_growth(data: Results) -> str:
    return (f"{_span([run['speedup_median'] for run in data['runs']], unit='x')} faster decoding "
            f"({data['model']}), same tokens")


def _short_cpu_allocator_memory(data: Results) -> str:
    return f"**{data['peak_ratio_default_to_mapped']:.1f}x** lower peak memory ({data['model']}), same loss"


def _short_grpo_vs_trl(data: Results) -> str:
    if "settings" not in data:
        return f"**{data['tokens_per_s_ratio']:.2f}x** TRL's tokens/s"
    ratios = [entry[mode]["tokens_per_s_ratio"] for entry in data["settings"].values()
              for mode in ("full", "lora") if mode in entry]
    return f"{_span(ratios, unit='x')} TRL's tokens/s (tiny and small models, full and LoRA)"


def _short_cartridge(data: Results) -> str:
    model, entry = next(iter(data["models"].items()))
    key, row = next(iter(entry["runs"].items()))
    return (f"{model} ({key.replace('_', '-')}): held-out KL down {_pct_span(row['kl_drop'])} with "
            f"{row['memory_ratio']:.0f}x less KV than the documents")


def _short_llm_precision(data: Results) -> str:
    learner = data.get("learner")
    if not learner:
        return "no learner figure yet"
    return f"bf16 LoRA learner **{learner['bf16_speedup']:.2f}x** float32's tokens/s ({data['model']})"


def _short_rollout_precision(data: Results) -> str:
    runs = {run["dtype"]: run for run in data["runs"]}
    return (f"bf16 rollouts **{runs['float32']['wall_s'] / runs['bfloat16']['wall_s']:.2f}x** faster, success "
            f"{_pct(runs['float32']['success_rate'])} vs {_pct(runs['bfloat16']['success_rate'])}")


def _short_decode_attention(data: Results) -> str:
    step = data["whole_model_step"]
    return (f"whole {step['model']} decode step in bf16: {step['bfloat16']['sdpa']['mask']:.0f} -> "
            f"{step['bfloat16']['fast']['mask']:.0f} ms")


def _short_precision_agents(data: Results) -> str:
    ratios = [row["float32_over_bfloat16"]["step_s"] for name in ("ztoken_ppo", "cartridge")
              for row in data[name].values()]
    return f"bf16 step {_span(ratios, unit='x')} float32's speed (the larger models gain)"


def _short_ray_scaleout(data: Results) -> str:
    results = data["results"]
    best = max(results, key=lambda name: results[name]["steps_per_s"])
    return (f"{results[best]['steps_per_s']:.2f} steps/s ({best}) vs {results['in-process']['steps_per_s']:.2f} "
            f"in process, {data['machine']['cpus']} CPU cores")


def _short_serve_load(data: Results) -> str:
    top = data["closed_loop"][-1]
    return (f"{top['sessions']} sessions: {top['steps_per_s']:,.0f} steps/s, p99 {top['p99_ms']:.1f} ms; "
            f"{data['leak_check']['leaked_sessions']} leaked sessions; goal: {_serve_goal(data)}")


ROWS: tuple[Row, ...] = (
    Row("`benchmarks/csr_env_throughput.py`", "CSRPhone-v1 env steps/s, scripted expert (goal >= 20,000)",
        ("csr_env_throughput.json",), _csr_env_throughput,
        headline=_short_csr_env_throughput, page="envs/csr-phone.md"),
    Row("`benchmarks/gameboy_throughput.py`", "frames/s for N emulators vs one PyBoy, same ROM and actions",
        ("gameboy_throughput_cpu.json",), _gameboy, headline=_short_gameboy, page="envs/gameboy.md"),
    Row("`benchmarks/fuzz_envs.py`", "hostile actions into every registered env: unhandled exceptions (goal 0), "
        "steps/s", ("fuzz_envs.json",), _fuzz_envs, headline=_short_fuzz_envs, page="failure-behaviour.md"),
    Row("`benchmarks/ztoken_ppo.py`", "held-out exact match: warm start vs PPO, SB3 PPO baseline",
        ("ztoken_ppo.json",), _ztoken_ppo, headline=_short_ztoken_ppo, page="agents/ztoken-ppo.md"),
    Row("`benchmarks/dreamer.py speed`", "seconds per gradient step vs sheeprl 0.8.4 "
        "(`benchmarks/sheeprl_dreamer_step.py`, own venv)", ("dreamer_speed.json",), _dreamer_speed,
        headline=_short_dreamer_speed, page="agents/dreamer-v3.md"),
    Row("`benchmarks/dreamer.py ratio`", "replay ratio actual vs target", ("dreamer_ratio.json",), _dreamer_ratio,
        headline=_short_dreamer_ratio, page="agents/dreamer-v3.md"),
    Row("`benchmarks/dreamer.py cartpole`", "env steps to mean return 475 on CartPole-v1 vs SB3 PPO",
        ("dreamer_cartpole.json",), _dreamer_cartpole,
        headline=_short_dreamer_cartpole, page="agents/dreamer-v3.md"),
    Row("`benchmarks/csr_policy.py`", "CSRPhone-v1 validation success on the 0/1 reward by model and difficulty: "
        "copying random baseline, warm starts, DAPO over seeds", ("csr_policy.json",), _csr_policy,
        headline=_short_csr_policy, page="results/csr-policy.md"),
    Row("`benchmarks/csr_dual_lora_vs_dapo.py`", "dual-LoRA transfer modes vs DAPO on CSRPhone-v1: validation "
        "success, tasks to threshold, WM accuracy, step time; `make demo`'s wall time", ("csr_dual_lora_vs_dapo.json",),
        _csr_dual_lora, optional=("csr_dual_lora_demo.json",), headline=_short_csr_dual_lora, page="results/dual-lora.md"),
    Row("`benchmarks/csr_rollout_speed.py`", "CSRPhone-v1 rollout episodes/s, KV cache kept across turns vs "
        "re-read; rows that stopped dropped from the batch vs kept", ("csr_rollout_speed.json",), _csr_rollout_speed,
        optional=("csr_rollout_speed_smollm2.json", "csr_rollout_speed_retire_smollm2.json"),
        headline=_short_csr_rollout_speed, page="agents/llm-stack.md"),
    Row("`benchmarks/kv_cache_growth.py`", "greedy decoding behind a long KV cache: transformers' DynamicCache "
        "(appends by concatenation) vs the engine's GrowingCache (in place)", ("kv_cache_growth.json",),
        _kv_cache_growth, headline=_short_kv_cache_growth, page="agents/llm-stack.md"),
    Row("`benchmarks/cpu_allocator_memory.py`", "process memory of a long-context LoRA backward on CPU (the world "
        "model's loss): glibc's default malloc vs large blocks mapped on their own (the SmolLM2 preset's setting)",
        ("cpu_allocator_memory.json",), _cpu_allocator_memory,
        headline=_short_cpu_allocator_memory, page="agents/llm-stack.md"),
    Row("`benchmarks/grpo_vs_trl.py`", "tokens/s and reward, our GRPO vs TRL `GRPOTrainer(loss_type=\"dapo\")`, "
        "same model and budget (`pip install -e \".[bench]\"`)", ("grpo_vs_trl.json",), _grpo_vs_trl,
        optional=("grpo_vs_trl_bfloat16.json",),
        headline=_short_grpo_vs_trl, page="agents/grpo.md"),
    Row("`benchmarks/cartridge_on_vs_offline.py`", "cartridge distillation on LongHealthQA-v0, same budget: "
        "held-out KL drop and accuracy recovery, on-policy vs offline vs hybrid, text vs random init",
        ("cartridge_on_vs_offline.json",), _cartridge,
        headline=_short_cartridge, page="results/cartridges.md"),
    Row("`benchmarks/fresh_clone.py`", "the README's make targets on a fresh clone: minutes each, the test summary",
        ("fresh_clone.json",), _fresh_clone, headline=_short_fresh_clone, page="install.md", in_summary=False),
    Row("`benchmarks/cpu_matmul_dtype.py`", "float32 vs bf16 matrix products on each kind of CPU measured (what "
        "`dtype=\"auto\"` decides on): GFLOP/s, one thread", ("cpu_matmul_dtype.json",), _cpu_matmul_dtype,
        headline=_short_cpu_matmul_dtype, page="precision.md", in_summary=False),
    Row("`benchmarks/llm_precision.py`", "float32 vs bf16 on the LLM stack: learner throughput, a DAPO step, "
        "the CSR warm start's SFT", ("llm_precision_smollm2.json",), _llm_precision,
        headline=_short_llm_precision, page="results/precision.md"),
    Row("`benchmarks/csr_rollout_speed.py --compare dtype`", "float32 vs bf16 CSRPhone-v1 rollouts: seconds per "
        "episode, greedy success, diverging episodes", ("csr_rollout_speed_dtype_smollm2.json",), _rollout_precision,
        headline=_short_rollout_precision, page="results/precision.md"),
    Row("`benchmarks/decode_attention.py`", "one decode step's attention behind a long KV cache: transformers' sdpa "
        "vs the engine's layout", ("decode_attention.json",), _decode_attention,
        headline=_short_decode_attention, page="results/precision.md"),
    Row("`benchmarks/precision_agents.py`", "float32 vs bf16 step time of Z-token PPO and the cartridge distiller",
        ("precision_agents.json",), _precision_agents,
        headline=_short_precision_agents, page="results/precision.md"),
    Row("`benchmarks/ray_scaleout.py`", "GRPO in process vs Ray rollout workers (1-2, sync / async lag 1): "
        "steps/s and time per phase", ("ray_scaleout.json",), _ray_scaleout,
        headline=_short_ray_scaleout, page="results/scale-out.md"),
    Row("`benchmarks/serve_load.py`", "`worldgym serve CSRPhone-v1` under 1-256 concurrent sessions vs in-process: "
        "steps/s, p50 / p99 step latency, memory per session, leaked sessions, a killed server; with `--attack`, a "
        "good session's p99 beside an attacker and RSS after fat sessions close",
        ("serve_load.json",), _serve_load, optional=("serve_attack.json",), headline=_short_serve_load,
        page="interop.md", in_summary=False),
)


def _load(path: Path) -> Results | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _cell(row: Row, results: Path, short: bool) -> str:
    """A row's result cell: its full description, or (``short``) its headline."""
    required = [_load(results / name) for name in row.files]
    if any(data is None for data in required):
        missing = ", ".join(name for name, data in zip(row.files, required, strict=True) if data is None)
        return f"not measured yet (no {missing})"
    if short and row.headline is not None:
        text = row.headline(*required)
    else:
        text = row.describe(*required, *(_load(results / name) for name in row.optional))
    return f"*quick run, figures mean nothing*: {text}" if any(data.get("quick") for data in required) else text


def _machine_cell(row: Row, results: Path) -> str:
    """The instruction-set level and native bf16 of the machines a row's figures were made on
    (:func:`worldgym.machine.isa_label`; a file made before results recorded it: "not recorded")."""
    labels: list[str] = []
    for data in (_load(results / name) for name in (*row.files, *row.optional)):
        if data is None:
            continue
        entries = data["machines"].values() if isinstance(data.get("machines"), dict) else [data]
        for entry in entries:
            machine = entry.get("machine")
            recorded = isinstance(machine, dict) and "cpu_isa" in machine  # older files: a platform string at most
            label = isa_label(machine if recorded else None)
            if label not in labels:
                labels.append(label)
    return " / ".join(labels) or "not recorded"


def render(results: Path) -> str:
    """The full markdown table (header included) for the results JSON in ``results``."""
    return "\n".join([HEADER, *(f"| {row.script} | {row.measures} | {_machine_cell(row, results)} | "
                                 f"{_cell(row, results, False)} |" for row in ROWS)])


def render_cpu_precision(results: Path) -> str:
    """The precision page's table: float32 vs bf16 matmul speed on each kind of CPU measured
    (``cpu_matmul_dtype.json``), one row per kind with the machine it was measured on."""
    data = _load(results / "cpu_matmul_dtype.json")
    if data is None:
        return "not measured yet (no cpu_matmul_dtype.json)"
    first = next(iter(data["machines"].values()))["shapes"]
    header = ["CPU", "instruction set"] + [f"{shape.replace('_', ' ')}: float32 / bf16 GFLOP/s (bf16 vs float32)"
                                           for shape in first]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in data["machines"].values():
        cells = [f"{figures['gflops']['float32']:.0f} / {figures['gflops']['bfloat16']:.1f} "
                 f"(**{figures['bf16_vs_float32']:.2f}x**)" for figures in row["shapes"].values()]
        machine = row["machine"]
        lines.append(f"| {machine['cpu_model']}, {machine['cpu_count']} cores | {isa_label(machine)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_summary(results: Path, docs: str = "docs") -> str:
    """The README's short table: per row the script, its headline and a link to its docs page under ``docs``."""
    lines = [SUMMARY_HEADER]
    for row in (row for row in ROWS if row.in_summary):
        name = row.script.strip("`").removeprefix("benchmarks/")
        lines.append(f"| `{name}` | {_machine_cell(row, results)} | {_cell(row, results, True)} | "
                     f"[{row.page.removesuffix('.md')}]({docs}/{row.page}) |")
    return "\n".join(lines)


def replace_table(text: str, table: str, start: str = START, end: str = END) -> str:
    """``text`` with what lies between its ``start`` and ``end`` marker lines replaced by ``table`` (by default
    the benchmark-table markers; the docs' other generated blocks name theirs)."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"the text must hold one {start} line and, after it, one {end} line")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{table}\n{end}{tail}"


def sync_pages(pages: dict[Path, Callable[[str], str]], check: bool, command: str) -> int:
    """Bring each page's generated blocks up to date (``pages``: a page -> its text with them rewritten), or
    with ``check`` write nothing and exit 1 when one is stale (naming ``command``, which rewrites them); prints
    each page that changed or would."""
    stale = False
    for path, rewrite in pages.items():
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            stale = True
            print(f"{portable(path)}: " + (f"stale: run `{command}`" if check else "rewritten"))
            if not check:
                path.write_text(new)
    return int(stale and check)


def table_in(readme: str) -> str:
    """The table currently between the markers of ``readme``."""
    return readme.split(START, 1)[1].split(END, 1)[0].strip("\n")
