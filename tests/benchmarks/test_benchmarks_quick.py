"""Every benchmark script end to end in its ``--quick`` mode, into ``tmp_path``: the results JSON it writes has
the expected keys and sane values, and no machine path (the committed results are never touched)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common import absolute_paths
from worldgym.agents.llm.engines.native_kernel import native_kernel

REPO = Path(__file__).resolve().parents[2]


def run(script: str, *argv: str, results: Path, env: dict[str, str] | None = None) -> str:
    """``python benchmarks/<script> <argv> --quick --results-dir <results>`` from the repository; its stdout."""
    command = [sys.executable, str(REPO / "benchmarks" / script), *argv, "--quick", "--results-dir", str(results)]
    return _check(command, env)


def run_stages(script: str, *stages: tuple[str, ...], results: Path) -> str:
    """Each stage's ``main([*stage, "--quick", "--results-dir", results])`` in one fresh interpreter (one import
    of torch and transformers instead of one per stage)."""
    argvs = [[*stage, "--quick", "--results-dir", str(results)] for stage in stages]
    code = f"from benchmarks.{script.removesuffix('.py')} import main\nfor argv in {argvs!r}:\n    main(argv)"
    return _check([sys.executable, "-c", code])


def _check(command: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **(env or {})})
    assert done.returncode == 0, f"{' '.join(command[1:])} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def load(path: Path) -> dict[str, Any]:
    """A results file, checked for machine paths."""
    data = json.loads(path.read_text())
    assert absolute_paths(data) == []
    return data


def test_csr_env_throughput(tmp_path: Path) -> None:
    run("csr_env_throughput.py", results=tmp_path)
    data = load(tmp_path / "csr_env_throughput.json")
    assert data["quick"] is True
    assert set(data["policies"]) == {"expert", "random", "sampled_calls"}
    for figures in data["policies"].values():
        assert figures["steps"] == 2000 and figures["episodes"] > 0
        assert 0 < figures["loop_steps_per_s"] <= figures["env_steps_per_s"]
    assert data["policies"]["expert"]["success_rate"] == 1.0
    assert data["policies"]["sampled_calls"]["success_rate"] == 0.0


def test_cpu_matmul_dtype_keeps_one_labelled_entry_per_kind_of_cpu(tmp_path: Path) -> None:
    from worldgym.machine import machine_info, machine_kind

    run("cpu_matmul_dtype.py", results=tmp_path)
    run("cpu_matmul_dtype.py", "--cap-isa", "AVX2", results=tmp_path)
    data = load(tmp_path / "cpu_matmul_dtype.json")
    here = machine_kind(machine_info())
    assert set(data["machines"]) == {here, "capped-avx2"}  # the capped run is a stand-in with its own key
    capped = data["machines"]["capped-avx2"]["machine"]
    assert capped["onednn_max_cpu_isa"] == "AVX2" and capped["cpu_isa"] == "AVX2"
    for entry in data["machines"].values():
        assert entry["quick"] is True and entry["machine"]["cpu_model"]
        for figures in entry["shapes"].values():
            assert figures["gflops"]["float32"] > 0 and figures["gflops"]["bfloat16"] > 0
    assert data["machine"]["cpu_isa"]  # the file as a whole records who wrote it last


def test_fresh_clone_times_each_target_of_a_clone(tmp_path: Path) -> None:
    run("fresh_clone.py", results=tmp_path)
    data = load(tmp_path / "fresh_clone.json")
    assert data["quick"] is True and data["all_passed"] is True and len(data["commit"]) == 40
    assert list(data["targets"]) == ["setup", "test", "docs"]
    for target, row in data["targets"].items():
        assert row["command"] == f"make -n {target}" and row["returncode"] == 0 and row["seconds"] >= 0


def test_fresh_clone_reads_the_test_summary() -> None:
    from benchmarks.fresh_clone import _SUMMARY

    log = "....\n1585 passed, 14 skipped, 2 warnings in 652.30s (0:10:52)\n"
    assert _SUMMARY.findall(log) == ["1585 passed, 14 skipped, 2 warnings"]
    assert _SUMMARY.findall("== 2 failed, 9 passed in 3.10s ==") == ["2 failed, 9 passed"]


def test_fuzz_envs(tmp_path: Path) -> None:
    run("fuzz_envs.py", results=tmp_path)
    data = load(tmp_path / "fuzz_envs.json")
    assert set(data["targets"]) == {"CSRPhone-v1/text", "CSRPhone-v1/tool_call", "MathQA-v1", "ZTokenDigits-v1",
                                    "ZTokenDigits-v1/flat", "GameBoy-v0", "MathQA-v1/unicode",
                                    "CSRPhone-v1/unicode", "config-files"}
    configs = data["targets"]["config-files"]
    assert configs["accepted"] + configs["rejected_with_typed_error"] == configs["steps"] > 0
    assert configs["slowest_refusal_s"] < 0.5
    assert data["total_steps"] == 600 and data["steps_per_s_in_env"] > 0
    assert data["unhandled_exceptions"] == data["contract_violations"] == 0 and data["goal_met"] is True


def test_gameboy_throughput(tmp_path: Path) -> None:
    run("gameboy_throughput.py", results=tmp_path)
    data = load(tmp_path / "gameboy_throughput_cpu.json")
    assert data["quick"] is True and data["cold_compile_s"] is None
    assert set(data["roms"]) == {"sprite_goal", "busy_loop"}
    for rom in data["roms"].values():
        assert [row["num_envs"] for row in rom["warp"]] == [1, 4]
        assert rom["pyboy_frames_per_s"] > 0
        assert all(row["frames_per_s"] > 0 and row["ratio_to_pyboy"] > 0 for row in rom["warp"])
    assert (tmp_path / "gameboy_throughput_cpu.png").stat().st_size > 0


def test_gameboy_throughput_without_pyboy(tmp_path: Path) -> None:
    out = run("gameboy_throughput.py", "--no-pyboy", results=tmp_path)
    data = load(tmp_path / "gameboy_throughput_cpu.json")
    for rom in data["roms"].values():
        assert rom["pyboy_frames_per_s"] is None and rom["pyboy_frames_per_s_runs"] == []
        assert all(row["frames_per_s"] > 0 and row["ratio_to_pyboy"] is None for row in rom["warp"])
    assert "PyBoy not timed" in out and (tmp_path / "gameboy_throughput_cpu.png").stat().st_size > 0


def test_ztoken_ppo(tmp_path: Path) -> None:
    run("ztoken_ppo.py", results=tmp_path)
    data = load(tmp_path / "ztoken_ppo.json")
    assert data["quick"] is True and data["settings"]["seeds"] == [0] and len(data["runs"]) == 1
    for stage in ("warm_start", "ppo", "supervised_control", "sb3"):
        assert 0 <= data["summary"][f"{stage}/exact_match"]["mean"] <= 1
    run_0 = data["runs"][0]
    assert [p["env_steps"] for p in run_0["ppo_curve"]] == sorted(p["env_steps"] for p in run_0["ppo_curve"])
    assert run_0["ppo_curve"][-1]["env_steps"] > 0
    assert (tmp_path / "ztoken_ppo.png").stat().st_size > 0


def test_csr_rollout_speed(tmp_path: Path) -> None:
    run("csr_rollout_speed.py", "--warm-start", results=tmp_path)  # the tiny warm start ships with the package
    data = load(tmp_path / "csr_rollout_speed.json")
    assert data["model"] == "tiny" and data["adapter"] is None and data["warm_start"].startswith("tiny-CSRPhone")
    runs = {run["kv_reuse"]: run for run in data["runs"]}
    assert len(data["runs"]) == 2 and set(runs) == {False, True}
    assert all(run["episodes"] == 2 and run["episodes_per_s"] > 0 and run["same_episodes"] for run in runs.values())
    assert runs[True]["positions_per_episode"] < runs[False]["positions_per_episode"]  # what KV reuse saves


def test_csr_rollout_speed_compares_retiring_rows(tmp_path: Path) -> None:
    run("csr_rollout_speed.py", "--warm-start", "--compare", "retire", results=tmp_path)
    data = load(tmp_path / "csr_rollout_speed_retire.json")
    assert data["compare"] == "retire" and not (tmp_path / "csr_rollout_speed.json").exists()
    assert [(run["kv_reuse"], run["retire"]) for run in data["runs"]] == [(True, False), (True, True)]
    assert all(run["same_episodes"] for run in data["runs"])
    off, on = data["runs"]
    assert on["positions_per_episode"] <= off["positions_per_episode"]


def test_csr_rollout_speed_compares_prefill_attention(tmp_path: Path) -> None:
    run("csr_rollout_speed.py", "--warm-start", "--compare", "prefill", results=tmp_path)
    data = load(tmp_path / "csr_rollout_speed_prefill.json")
    assert data["compare"] == "prefill"
    assert [(run["attention"], run["merge_lora"], run["dtype"]) for run in data["runs"]] == [
        ("native-decode", True, "bfloat16"), ("native", True, "bfloat16")]
    assert all(run["episodes"] == 2 and run["episodes_per_s"] > 0 for run in data["runs"])


def test_csr_rollout_speed_compares_malloc_settings(tmp_path: Path) -> None:
    run("csr_rollout_speed.py", "--compare", "allocator", results=tmp_path)
    data = load(tmp_path / "csr_rollout_speed_allocator.json")
    assert [(run["malloc"], run["attention"], run["dtype"]) for run in data["runs"]] == [
        ("released", "native", "bfloat16"), ("mapped", "native", "bfloat16")]
    assert all(run["same_episodes"] for run in data["runs"])  # malloc moves tensors, never their values


def test_csr_rollout_speed_compares_glibc_trimming_on_sampled_episodes(tmp_path: Path) -> None:
    run("csr_rollout_speed.py", "--compare", "heap", "--temperature", "0.5", results=tmp_path)
    data = load(tmp_path / "csr_rollout_speed_heap_T0.5.json")
    assert data["settings"]["temperature"] == 0.5 and data["env"].endswith("sampled at temperature 0.5")
    assert [run["malloc"] for run in data["runs"]] == ["trimmed", "held"]
    for figures in data["runs"]:
        assert figures["page_faults"] >= 0 and 0 <= figures["system_s"] <= figures["cpu_s"]
    assert all(run["same_episodes"] for run in data["runs"])  # the same seeds sample the same tokens


def test_csr_rollout_speed_allocator_compare_needs_one_configuration() -> None:
    from benchmarks.csr_rollout_speed import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--compare", "allocator", "--difficulties", "1", "3"])


def test_lora_dropout(tmp_path: Path) -> None:
    run("lora_dropout.py", results=tmp_path)
    data = load(tmp_path / "lora_dropout.json")
    on, off = data["dropout"], data["no_dropout"]
    assert data["quick"] is True and (on["p"], off["p"]) == (0.05, 0.0)
    assert on["seconds"] > 0 and off["seconds"] > 0 and data["speedup"] == pytest.approx(on["seconds"] / off["seconds"])
    assert on["log_ratio_std"] > 0 and off["log_ratio_std"] == off["outside_clip"] == 0  # no dropout: ratio 1


def test_world_model_replies(tmp_path: Path) -> None:
    out = run("world_model_replies.py", "--variants", "without-rows", "with-rows", "expert-chats", results=tmp_path)
    assert " calls in " in out and " expert chats" in out  # the expert-chats variant read the warm start's chats
    data = load(tmp_path / "world_model_replies.json")
    (entry,) = [value for key, value in data.items() if key != "machine"]
    (row,) = entry["runs"]
    assert row["quick"] is True and row["finished"] is True
    assert row["training_calls"] > 0 and row["held_out_calls"] > 0
    assert list(row["curves"]) == ["without-rows", "with-rows", "expert-chats"]
    for curve in row["curves"].values():
        assert [point["update"] for point in curve] == [0, 1, 2]
        for point in curve:
            assert 0 <= point["type_accuracy"] <= point["nearest_type_accuracy"] <= 1  # nearest reads more
            assert 0 <= point["closed"] <= 1 and point["reply_tokens_mean"] >= 0
            assert len(point["replies"]) == row["held_out_calls"] and 0 < point["commonest_type_share"] <= 1
            for reply in point["replies"]:  # an exactly read reply reads the same by nearest template
                assert reply["exact"] == "unrecognised" or reply["nearest"] == reply["exact"]
        assert curve[1]["loss_mean"] > 0
    # the same calls, the same warm start: the variants start from the same replies
    first = [curve[0] for curve in row["curves"].values()]
    assert all(point["replies"] == first[0]["replies"] for point in first)
    assert all(point["token_accuracy"] == first[0]["token_accuracy"] for point in first)
    png = tmp_path / "world_model_replies.png"
    assert png.is_file()
    png.unlink()
    run("world_model_replies.py", "--plot-only", results=tmp_path)  # redrawn from the JSON, nothing trained
    assert png.is_file() and load(tmp_path / "world_model_replies.json") == data


def test_token_sampling(tmp_path: Path) -> None:
    run("token_sampling.py", results=tmp_path)
    data = load(tmp_path / "token_sampling.json")
    figures = data["time"]["4"]
    assert data["quick"] is True and figures["multinomial"]["ms"] > 0 and figures["inverse_cdf"]["ms"] > 0
    assert figures["speedup"] == pytest.approx(figures["multinomial"]["ms"] / figures["inverse_cdf"]["ms"])
    for sampler in ("multinomial", "inverse_cdf"):
        assert data["distribution"][sampler]["max_frequency_gap"] < 0.02
        assert data["distribution"][sampler]["zero_probability_draws"] == 0


@pytest.mark.skipif(native_kernel("flash_attention") is None, reason="the native flash attention cannot be built here")
def test_flash_attention(tmp_path: Path) -> None:
    run("flash_attention.py", results=tmp_path)
    data = load(tmp_path / "flash_attention.json")
    assert data["quick"] is True and data["threads"] == 1 and set(data["training"]) == {"96"}
    for kernel in ("sdpa", "native"):
        layer = data["training"]["96"][kernel]
        assert layer["forward_ms"] > 0 and layer["backward_ms"] > 0 and data["prefill"][kernel] > 0
        learner = data["learner"][kernel]
        assert learner["seconds"] > 0 and 0 <= learner["gradient_error"] < 0.1  # bf16 against float32
    assert abs(data["learner"]["sdpa"]["loss"] - data["learner"]["native"]["loss"]) < 0.05


def test_kv_cache_growth(tmp_path: Path) -> None:
    run("kv_cache_growth.py", results=tmp_path)
    data = load(tmp_path / "kv_cache_growth.json")
    assert data["model"] == "tiny" and data["quick"] is True and len(data["runs"]) == 1
    row = data["runs"][0]
    assert row["same_tokens"] is True and row["speedup"] == [pytest.approx(row["seconds"]["concatenating"][0]
                                                                          / row["seconds"]["growing"][0])]


def test_cpu_allocator_memory(tmp_path: Path) -> None:
    run("cpu_allocator_memory.py", results=tmp_path)
    data = load(tmp_path / "cpu_allocator_memory.json")
    assert data["model"] == "tiny" and data["quick"] is True and data["same_loss"] is True
    assert [row["mode"] for rows in data["runs"].values() for row in rows] == ["default", "mapped"]
    run("cpu_allocator_memory.py", "--workload", "learner", results=tmp_path)
    learner = load(tmp_path / "cpu_allocator_memory_learner.json")
    assert learner["lengths"] == [64, 96] and learner["same_loss"] is True and "--workload learner" in learner["command"]
    assert list(learner["runs"]) == ["default", "mapped", "released"]
    assert all(len(row["resident_gb_after_each"]) == 2 for rows in learner["runs"].values() for row in rows)
    assert learner["seconds_mapped_to_released"] == pytest.approx(learner["median"]["mapped"]["seconds"]
                                                                  / learner["median"]["released"]["seconds"])


def test_ray_scaleout(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    run("ray_scaleout.py", results=tmp_path)
    data = load(tmp_path / "ray_scaleout.json")
    results = data["results"]
    assert set(results) == {"in-process", "ray-1-sync", "ray-1-async"} and data["steps"] == 2
    assert results["in-process"]["speed_vs_in_process"] == 1.0
    assert results["ray-1-sync"]["policy_lag_mean"] == 0 and results["ray-1-async"]["policy_lag_mean"] == 1
    assert all(r["steps_per_s"] > 0 and r["phases_s"]["update"] > 0 for r in results.values())
    assert results["ray-1-sync"]["phases_s"]["worker_busy"] > 0
    for prediction in data["scaling_model"].values():
        assert prediction["async_steps_per_s"] >= prediction["sync_steps_per_s"] > 0
    assert (tmp_path / "ray_scaleout.png").stat().st_size > 0


def test_serve_load(tmp_path: Path) -> None:
    pytest.importorskip("openenv", reason="needs the interop extra (openenv-core)")
    run("serve_load.py", results=tmp_path)
    data = load(tmp_path / "serve_load.json")
    assert data["quick"] is True and [row["sessions"] for row in data["closed_loop"]] == [1, 8]
    for row in [*data["closed_loop"], data["paced"], data["in_process"]]:
        assert row["steps_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"] and row["success_rate"] == 1.0
    assert data["paced"]["think_ms"] == 50 and data["paced"]["sessions"] == 8
    leak = data["leak_check"]
    assert leak["sessions_opened"] == leak["active_at_peak"] == 50 and leak["leaked_sessions"] == 0
    kill = data["server_kill"]
    assert kill["errors_raised"] == ["RemoteEnvError"] and kill["typed_errors"] == kill["clients"] == 4
    assert data["goal_no_leaks_met"] is True and data["goal_kill_met"] is True
    assert (tmp_path / "serve_load.png").stat().st_size > 0


def test_serve_load_attack(tmp_path: Path) -> None:
    pytest.importorskip("openenv", reason="needs the interop extra (openenv-core)")
    run("serve_load.py", "--attack", results=tmp_path)
    data = load(tmp_path / "serve_attack.json")
    attack = data["attack"]
    for row in (attack["alone"], attack["attacked"]):
        assert row["steps_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"] and row["success_rate"] == 1.0
    assert attack["kinds"] == ["heavy", "oversized", "dribble", "metadata"] and attack["p99_ratio"] > 0
    fat = data["fat_sessions"]
    assert fat["sessions"] == 10 and fat["messages_per_session"] == 15
    assert fat["idle_server_rss_mib"] <= fat["peak_server_rss_mib"] and fat["server_rss_mib_after"] > 0


def test_csr_policy_every_stage(tmp_path: Path) -> None:
    tiny_d1 = ("--model", "tiny", "--decoding", "constrained", "--difficulty", "1")
    out = run_stages("csr_policy.py", ("random",), ("warm-start", "--model", "tiny", "--decodings", "constrained"),
                     ("warm-start", "--model", "tiny", "--decodings", "constrained", "--mistake-rate", "0.3",
                      "--continue-on", "2"),
                     ("dapo", *tiny_d1), ("dapo", *tiny_d1, "--temperature", "0.7"),
                     ("dapo", *tiny_d1, "--mistake-rate", "0.3", "--continue-on", "2"),
                     ("sampled", *tiny_d1, "--temperatures", "1", "0.5"),
                     ("sampled", *tiny_d1, "--temperatures", "1", "--mistake-rate", "0.3", "--continue-on", "2"),
                     ("report",), results=tmp_path)
    assert "validation success by step" in out
    parts = {p.name for p in (tmp_path / "csr_policy").glob("*.json")}
    assert parts == {"random_copy.json", "tiny-warm_start.json", "tiny-warm_start-mistakes0.3-continued-d2.json",
                     "tiny-dapo-constrained-d1-t4-s0.json",
                     "tiny-dapo-constrained-d1-t4-s0-T0.7.json", "tiny-sampled-constrained-d1-t4.json",
                     "tiny-dapo-constrained-d1-t4-s0-mistakes0.3-continued-d2.json",
                     "tiny-sampled-constrained-d1-t4-mistakes0.3-continued-d2.json"}
    for part in parts:
        load(tmp_path / "csr_policy" / part)
    data = load(tmp_path / "csr_policy.json")
    assert set(data["random_copy"]) == {"1", "2", "3", "4", "5"}
    assert set(data["tiny"]["warm_start"]["constrained"]["success"]) == {"1"}
    other = data["tiny"]["other_warm_starts"]["mistakes0.3-continued-d2"]  # with its own DAPO run and sampling
    assert set(other["warm_start"]["constrained"]["success"]) == {"1"}
    assert other["dapo"]["constrained"]["success"]["1"]["seed_ids"] == [0]
    assert set(other["sampled_train_success"]["constrained"]["1"]) == {"1"}
    dapo = data["tiny"]["dapo"]["constrained"]["success"]["1"]
    assert dapo["seed_ids"] == [0, 0] and [step for step, _ in dapo["curves"][0]] == [0, 1]
    assert 0 <= dapo["mean"] <= 1 and dapo["max_turns"] == [4] and dapo["temperatures"] == [0.7, 1.0]
    sampled = data["tiny"]["sampled_train_success"]["constrained"]["1"]
    assert set(sampled) == {"1", "0.5"} and all(0 <= s <= 1 for s in sampled.values())
    assert (tmp_path / "csr_policy.png").stat().st_size > 0


def test_csr_policy_report_leaves_out_runs_stopped_before_their_first_step(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.csr_policy import trained_runs

    def part(seed: int, done: int) -> dict[str, Any]:
        return {"seed": seed, "steps": 8, "steps_done": done, "command": f"dapo --seed {seed}"}

    runs = [part(0, 2), part(0, 0), part(1, 8)]
    assert trained_runs(runs, "m") == [runs[0], runs[2]]
    assert "left out a DAPO run with no step done (dapo --seed 0)" in capsys.readouterr().out
    assert trained_runs([{"seed": 3, "steps": 4}], "m") == [{"seed": 3, "steps": 4}]  # older parts: finished


def test_csr_dual_lora_vs_dapo_run_and_report(tmp_path: Path) -> None:
    run("csr_dual_lora_vs_dapo.py", "run", "--mode", "dapo", results=tmp_path)  # the command line, once
    run_stages("csr_dual_lora_vs_dapo.py", ("run", "--mode", "separate"),
               *[("step-time", "--mode", "dapo", "--steps", "1")] * 2, ("step-time", "--mode", "separate", "--steps", "1"),
               ("step-time", "--mode", "dapo", "--steps", "1", "--temperature", "0.5", "--lora-dropout", "0"),
               ("report",), ("step-time", "--mode", "separate", "--steps", "1", "--from-checkpoint",
                             str(tmp_path / "runs" / "csr_dual_lora" / "tiny-separate-d1-s0" / "checkpoint-2")),
               results=tmp_path)
    table = load(tmp_path / "csr_dual_lora_step_time.json")
    timing = table["tiny-dapo"]  # every run kept, and their mean
    assert len(timing["runs"]) == 2 and len(timing["runs"][0]["episodes_sampled"]) == 2  # --quick: 2 steps
    assert timing["time/step_s"] == pytest.approx(sum(run["time/step_s"] for run in timing["runs"]) / 2)
    assert timing["runs"][0]["machine"]["cpu_count"] and len(table["tiny-dapo-T0.5"]["runs"]) == 1  # its own entry
    part = load(tmp_path / "csr_dual_lora" / "tiny-separate-d1-s0.json")
    assert part["command"].endswith("--quick") and part["config"]["output_dir"] == "tiny-separate-d1-s0"  # no tmp path
    assert [step for step, _ in part["curve"]] == [0, 2] and len(part["step_seconds"]) == 2
    assert part["tasks_by_step"][0] == 0 and part["tasks_by_step"] == sorted(part["tasks_by_step"])
    assert part["wm_warmup_seconds"] == 0 and part["wm_warmup_loss"] is None  # the mode warms nothing up
    data = load(tmp_path / "csr_dual_lora_vs_dapo.json")
    rows = data["runs"]["tiny-d1"]
    assert list(rows) == ["dapo", "separate"] and data["quick"] is True
    assert rows["dapo"]["step_time_vs_dapo"] == 1.0 and rows["separate"]["step_time_vs_dapo"] > 0
    timed = data["step_time_vs_dapo_side_by_side"]["tiny-d1"]  # from step-time runs started close together
    assert set(timed) == {"dapo", "separate"} and list(timed["dapo"].values()) == [1.0]  # each DAPO run with itself
    (side_by_side,) = timed["separate"].values()
    separate, resumed = table["tiny-separate"]["runs"]  # the second from the run's last checkpoint, after the report
    assert resumed["from_checkpoint"].endswith("checkpoint-2") and "from_checkpoint" not in separate
    assert side_by_side == pytest.approx(sum(separate["time/step_s"] / run["time/step_s"]
                                             for run in timing["runs"]) / 2)  # both DAPO runs started within 5 min
    for row in rows.values():
        assert row["seeds"] == [0] and 0 <= row["final_success_mean"] <= 1
        assert 0 <= row["final_wm_token_accuracy"][0] <= 1
        low, high = row["final_success_ci95"]  # the last validation's 4 episodes, resampled
        assert 0 <= low <= row["final_success_mean"] <= high <= 1 and row["finished"] == [True]
        assert list(row["step_time_vs_dapo_by_machine"].values()) == [pytest.approx(row["step_time_vs_dapo"])]
        assert row["wm_warmup_seconds"] == [0.0]
    assert len(part["episode_success_curve"][-1][1]) == 4 and part["finished"] is True
    assert (tmp_path / "csr_dual_lora_vs_dapo.png").stat().st_size > 0


def test_csr_dual_lora_imagined_replies(tmp_path: Path) -> None:
    run("csr_dual_lora_vs_dapo.py", "imagined-replies", "--mode", "separate-own-clip-imagined50", results=tmp_path)
    (row,) = load(tmp_path / "imagined_replies.json")["tiny-separate-own-clip-imagined50"]["runs"]
    plain, reuse = row["replays"]["plain"], row["replays"]["reuse"]
    assert row["round"]["imagined_calls"] == row["replies"] > 0 and row["round"]["reply_batches"] >= 2
    assert row["same_replies"] == row["replies"]  # float32: KV reuse changes no reply
    assert plain["prompt_tokens"] == reuse["prompt_tokens"] and plain["reply_tokens"] == reuse["reply_tokens"]
    assert plain["reused_tokens"] == 0 < reuse["reused_tokens"] < reuse["prompt_tokens"]
    assert row["replay_speedup"] == pytest.approx(plain["seconds"] / reuse["seconds"])


def test_csr_dual_lora_vs_dapo_from_another_warm_start(tmp_path: Path) -> None:
    run_stages("csr_dual_lora_vs_dapo.py", ("run", "--mode", "dapo", "--continue-on", "1"), ("run", "--mode", "dapo"),
               ("report",), results=tmp_path)
    part = load(tmp_path / "csr_dual_lora" / "tiny-dapo-d1-s0-continued-d1.json")
    assert part["warm_start_suffix"] == "-continued-d1" and " --continue-on 1 " in part["command"]
    rows = load(tmp_path / "csr_dual_lora_vs_dapo.json")["runs"]  # never merged with the preset's warm start
    assert set(rows) == {"tiny-d1", "tiny-d1-continued-d1"} and rows["tiny-d1-continued-d1"]["dapo"]["seeds"] == [0]
    assert list((tmp_path / "runs" / "warm_starts").glob("tiny-*"))  # the continued warm start, trained for it


def test_csr_dual_lora_demo_time(tmp_path: Path) -> None:
    run("csr_dual_lora_vs_dapo.py", "demo-time", results=tmp_path)
    data = load(tmp_path / "csr_dual_lora_demo.json")
    assert data["quick"] is True and data["command"].startswith("python examples/train_dual_lora.py demo --agent")
    assert data["seconds"] > 0 and data["cores"] == os.cpu_count()
    assert [step for step, _ in data["success"]] == [0, 1] and all(0 <= s <= 1 for _, s in data["success"])
    assert (tmp_path / "runs" / "demo_time" / "curves.png").is_file()  # the demo's own outputs, in the scratch dir
    assert (tmp_path / "csr_dual_lora_demo.png").stat().st_size > 0  # the copy the README shows


def test_sheeprl_dreamer_step_skips_cleanly_without_sheeprl(tmp_path: Path) -> None:
    if importlib.util.find_spec("sheeprl") is not None:
        pytest.skip("sheeprl is installed in this venv: nothing to skip")
    out = run("sheeprl_dreamer_step.py", results=tmp_path / "results",
              env={"WORLDGYM_SHEEPRL_PYTHON": str(tmp_path / "no-such-python")})
    assert out.startswith("skipped: sheeprl is not installed")
    assert not (tmp_path / "results").exists()


def test_sheeprl_dreamer_step(tmp_path: Path) -> None:
    from benchmarks.sheeprl_dreamer_step import sheeprl_python

    if importlib.util.find_spec("sheeprl") is None and sheeprl_python() is None:
        pytest.skip("no venv with sheeprl (runs/sheeprl-venv or $WORLDGYM_SHEEPRL_PYTHON)")
    run("sheeprl_dreamer_step.py", results=tmp_path)
    data = load(tmp_path / "sheeprl_dreamer_step.json")
    (row,) = data["rows"]
    assert row["sheeprl"] == "0.8.4" and row["size"] == "XS" and (row["batch_size"], row["seq_len"]) == (2, 8)
    assert row["s_per_step"] > 0 and row["cpu_s_per_step"] > 0


def test_dreamer_every_command_with_sheeprl_from_its_results_file(tmp_path: Path) -> None:
    sheeprl = {"rows": [{"sheeprl": "0.8.4", "size": "XS", "batch_size": 2, "seq_len": 8, "threads": 1,
                         "s_per_step": 0.5, "cpu_s_per_step": 0.25, "label": "test"}]}
    (tmp_path / "sheeprl_dreamer_step.json").write_text(json.dumps(sheeprl))
    out = run_stages("dreamer.py", ("speed",), ("ratio",), ("cartpole",), results=tmp_path)
    speed = load(tmp_path / "dreamer_speed.json")
    rows = {row["size"]: row for row in speed["rows"]}
    assert speed["quick"] is True and set(rows) == {"tiny", "XS"}
    assert rows["tiny"]["sheeprl_s_per_step"] is None and rows["tiny"]["speedup"] is None
    assert "no row with {'size': 'tiny'" in rows["tiny"]["sheeprl_source"]
    xs = rows["XS"]
    assert (xs["sheeprl_s_per_step"], xs["sheeprl_cpu_s_per_step"]) == (0.5, 0.25)
    assert xs["speedup"] == pytest.approx(0.5 / xs["s_per_step"])
    assert xs["cpu_speedup"] == pytest.approx(0.25 / xs["cpu_s_per_step"])
    assert "sheeprl 0.500 s/step" in out
    (ratio,) = load(tmp_path / "dreamer_ratio.json")["rows"]
    assert ratio["target"] == 0.5 and ratio["relative_error"] < 0.1
    cartpole = load(tmp_path / "dreamer_cartpole.json")
    assert [(r["agent"], r["seed"]) for r in cartpole["runs"]] == [("dreamer", 0), ("ppo", 0)]
    assert all(r["wall_s"] > 0 for r in cartpole["runs"]) and cartpole["max_steps"] == 600
    assert (tmp_path / "dreamer_cartpole.png").stat().st_size > 0


def test_dreamer_speed_says_when_sheeprl_was_not_measured(tmp_path: Path) -> None:
    from benchmarks.dreamer import sheeprl_figures

    args = argparse.Namespace(quick=True, results_dir=tmp_path, batch_size=2, seq_len=8, threads=1)
    assert sheeprl_figures(args, "XS") == (
        None, "not measured: no sheeprl_dreamer_step.json (run benchmarks/sheeprl_dreamer_step.py)")
