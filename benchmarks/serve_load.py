"""``worldgym serve CSRPhone-v1`` under load: steps/s and step latency at 1, 64 and 256 concurrent sessions vs
the same env in-process, memory per session, leaked sessions, and a killed server seen by every client.

Usage: ``python benchmarks/serve_load.py [--sessions 1 64 256] [--seconds 15] [--attack] [--quick]
[--results-dir DIR]``; writes ``serve_load.json`` and ``serve_load.png`` (``serve_attack.json`` with
``--attack``) to ``benchmarks/results/`` (see ``--help``). Needs the
``interop`` extra (openenv-core, fastapi, uvicorn) and Linux (the server's memory and CPU are read from ``/proc``).

The server runs in its own process (``python -m worldgym serve CSRPhone-v1`` on a free localhost port); the
clients run in this process as openenv-core's own async client (``GenericEnvClient``, one WebSocket session each,
all on one asyncio loop: no thread per client), each playing episodes with the scripted expert
(``ExpertPolicy``, success in every episode) in a closed loop: no pause between steps, so the server is
saturated from 64 sessions on (one paced level aside). Reported:
  * per session count: steps/s over all sessions, p50 / p99 step latency (request sent to observation back, as
    the client sees it), the server's CPU cores used (its CPU-s over the wall time) and steps per server CPU-s
    (what one core of its own would serve: meaningful when other jobs share the cores), its RSS with the
    sessions open and, from that, memory per session (RSS growth over the idle server / sessions);
  * the same at the largest session count with a ``--think-ms`` pause between a session's steps, as an agent
    that takes that long to choose its next call;
  * in-process: the same env and expert without a server (steps/s, p50 / p99 ``env.step`` time);
  * sessions per core, without pause and paced: the largest session count whose p99 met the latency goal,
    over the server's cores used counted as at least 1 (one process, one event loop: about one core of
    Python at most);
  * leak check: ``--leak-sessions`` sessions opened at once, then dropped without a goodbye (TCP aborted, no
    close frame); the server's session count must fall back to 0 (well before the idle timeout could do it);
  * server kill: ``--kill-clients`` ``OpenEnvGym`` clients mid-episode, the server SIGKILLed; each client's next
    step must raise ``worldgym.errors.RemoteEnvError`` within its ``timeout_s``;
  * attack (``--attack``, written to ``serve_attack.json``): one well-behaved session alone, then beside an
    attacker process (messages near the size limit that fail validation, unknown-key floods, oversized and
    deflate-bomb messages, bad resets, dribbled handshakes, ``/metadata`` floods): the good session's p50 / p99
    both ways (goal: p99 with the attacker within 2x of without); then ``--fat-sessions`` sessions, each sending
    15 messages just under the size limit, closed, and the server's RSS after against the idle server's (goal:
    within 50 MB).
The machine's cores are shared with the clients (and other jobs: the load average is recorded).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import REPO, results_dir, results_parser, write_json

ENV_ID = "CSRPhone-v1"
GOAL_SESSIONS_PER_CORE = 256
GOAL_P99_MS = 50.0
IDLE_TIMEOUT_S = 300.0  # the server's session timeout: far longer than the leak check may take
LEAK_DEADLINE_S = 30.0
DEFAULT_SERVER_SESSIONS = 256
KILL_TIMEOUT_S = 10.0
GOAL_ATTACK_P99_RATIO = 2.0
GOAL_FAT_RSS_MB = 50.0
FAT_MESSAGE_BYTES = 260_000  # just under the server's default 256 KiB message limit
FAT_MESSAGES = 15


@dataclass
class Load:
    """What the sessions of one load level measured, summed over sessions."""

    latencies_s: list[float] = field(default_factory=list)
    episodes: int = 0
    successes: int = 0


# ---------------------------------------------------------------------------------------------- the server
def free_port() -> int:
    """A localhost port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(max_sessions: int) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m worldgym serve CSRPhone-v1`` in its own process, and its URL (see :func:`wait_ready`)."""
    port = free_port()
    command = [sys.executable, "-m", "worldgym", "serve", ENV_ID, "--port", str(port),
               "--max-sessions", str(max_sessions), "--session-timeout", str(IDLE_TIMEOUT_S)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(command, cwd=REPO, env=env), f"http://127.0.0.1:{port}"


def wait_ready(process: subprocess.Popen[bytes], url: str, timeout_s: float = 60.0) -> None:
    """Poll ``GET /sessions`` until the server answers.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before answering")
        try:
            active_sessions(url)
            return
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the server did not answer within {timeout_s:.0f} s")


def active_sessions(url: str) -> int:
    """The server's open sessions (``GET /sessions``)."""
    import httpx

    try:
        return int(httpx.get(f"{url}/sessions", timeout=5).json()["active"])
    except httpx.HTTPError as error:
        raise OSError(str(error)) from error


def rss_mib(pid: int) -> float:
    """A process's resident memory in MiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time (``/proc/<pid>/stat``), its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- in-process
def in_process(seconds: float, seed: int) -> dict[str, float]:
    """The env and the expert without a server: steps/s and ``env.step`` latency over ``seconds``."""
    import gymnasium as gym

    from worldgym.envs.csr_phone.policies import ExpertPolicy

    env, expert, load = gym.make(ENV_ID), ExpertPolicy(), Load()
    text, info = env.reset(seed=seed)
    expert.reset(text, info)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        call = expert.act(text, info)
        began = time.perf_counter()
        text, _, terminated, truncated, info = env.step(call)
        load.latencies_s.append(time.perf_counter() - began)
        if terminated or truncated:
            load.episodes += 1
            load.successes += int(info["success"])
            text, info = env.reset()
            expert.reset(text, info)
    return figures(load, time.perf_counter() - start)


def figures(load: Load, wall_s: float) -> dict[str, float]:
    """Steps/s and p50 / p99 latency (ms) of a load, and its episodes' success rate."""
    latencies_ms = 1000 * np.asarray(load.latencies_s)
    return {"steps": len(load.latencies_s), "steps_per_s": len(load.latencies_s) / wall_s,
            "p50_ms": float(np.percentile(latencies_ms, 50)), "p99_ms": float(np.percentile(latencies_ms, 99)),
            "episodes": load.episodes, "success_rate": load.successes / max(load.episodes, 1)}


# ---------------------------------------------------------------------------------------------- over the wire
async def open_session(url: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """A connected openenv-core client with a reset episode; its reset observation."""
    from openenv.core import GenericEnvClient

    client = GenericEnvClient(base_url=url, message_timeout_s=60.0)
    await client.connect()
    return client, (await client.reset(seed=seed)).observation


async def play(client: Any, observation: dict[str, Any], start: asyncio.Event, stop: asyncio.Event,
               load: Load, think_s: float) -> None:
    """Expert episodes on one session from ``start`` until ``stop``, each step's round trip timed; ``think_s``
    between steps (the first after a random part of it, so that paced sessions do not step in lockstep)."""
    from worldgym.envs.csr_phone.policies import ExpertPolicy

    expert = ExpertPolicy()
    text, info = observation["text"], observation["info"]
    expert.reset(text, info)
    await start.wait()
    await asyncio.sleep(random.uniform(0, think_s))
    while not stop.is_set():
        call = expert.act(text, info)
        began = time.perf_counter()
        result = await client.step({"type": "call_tool", "tool_name": call.name, "arguments": dict(call.arguments)})
        load.latencies_s.append(time.perf_counter() - began)
        text, info = result.observation["text"], result.observation["info"]
        if result.done:
            load.episodes += 1
            load.successes += int(info.get("success") is True)
            observation = (await client.reset()).observation
            text, info = observation["text"], observation["info"]
            expert.reset(text, info)
        await asyncio.sleep(think_s)


async def load_level(url: str, pid: int, sessions: int, seconds: float, seed: int,
                     think_s: float = 0.0) -> dict[str, float]:
    """``sessions`` concurrent sessions stepping for ``seconds`` (after all have connected and reset), each
    pausing ``think_s`` between steps; the server's and this process's (the clients') CPU cores used."""
    clients = await asyncio.gather(*(open_session(url, seed + i) for i in range(sessions)))
    rss_open = rss_mib(pid)
    start, stop, load = asyncio.Event(), asyncio.Event(), Load()
    tasks = [asyncio.create_task(play(client, observation, start, stop, load, think_s))
             for client, observation in clients]
    await asyncio.sleep(0)
    cpu_before, client_cpu_before, began = cpu_seconds(pid), time.process_time(), time.perf_counter()
    start.set()
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    wall_s = time.perf_counter() - began
    server_cores = (cpu_seconds(pid) - cpu_before) / wall_s
    client_cores = (time.process_time() - client_cpu_before) / wall_s
    await asyncio.gather(*(client.close() for client, _ in clients))
    row = {"sessions": sessions, "think_ms": 1000 * think_s, **figures(load, wall_s)}
    return {**row, "server_cores_used": server_cores, "client_cores_used": client_cores,
            "server_steps_per_cpu_s": row["steps_per_s"] / max(server_cores, 1e-9), "server_rss_mib": rss_open}


# ---------------------------------------------------------------------------------------------- leak check
async def leak_check(url: str, pid: int, sessions: int, idle_rss_mib: float) -> dict[str, Any]:
    """Open ``sessions`` raw WebSocket sessions at once (each reset; the server's memory per session then),
    abort every TCP connection without a close frame, and time the server's session count back to 0."""
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"
    settled = time.perf_counter()  # the load levels' sessions are freed as their sockets close: wait for it
    while await asyncio.to_thread(active_sessions, url) and time.perf_counter() - settled < LEAK_DEADLINE_S:
        await asyncio.sleep(0.05)

    async def opened(seed: int) -> Any:
        ws = await connect(ws_url, max_size=None, open_timeout=60)
        await ws.send(f'{{"type": "reset", "data": {{"seed": {seed}}}}}')
        await ws.recv()
        return ws

    sockets = await asyncio.gather(*(opened(seed) for seed in range(sessions)))
    peak, rss_peak = await asyncio.to_thread(active_sessions, url), rss_mib(pid)
    dropped = time.perf_counter()
    for ws in sockets:
        ws.transport.abort()  # the client vanishes: no close frame, no goodbye
    left = peak
    while left and time.perf_counter() - dropped < LEAK_DEADLINE_S:
        await asyncio.sleep(0.05)
        left = await asyncio.to_thread(active_sessions, url)
    return {"sessions_opened": sessions, "active_at_peak": peak, "server_rss_mib_at_peak": rss_peak,
            "mib_per_session": (rss_peak - idle_rss_mib) / sessions, "leaked_sessions": left,
            "seconds_to_zero": None if left else time.perf_counter() - dropped}


# ---------------------------------------------------------------------------------------------- server kill
def kill_check(process: subprocess.Popen[bytes], url: str, clients: int) -> dict[str, Any]:
    """``clients`` ``OpenEnvGym`` envs mid-episode, the server SIGKILLed, then every client steps at once:
    which error each raised and how long after the kill."""
    from worldgym.envs.csr_phone.policies import ExpertPolicy
    from worldgym.errors import RemoteEnvError
    from worldgym.wrappers import OpenEnvGym

    envs = [OpenEnvGym(url, timeout_s=KILL_TIMEOUT_S) for _ in range(clients)]
    calls = []
    for seed, env in enumerate(envs):
        expert = ExpertPolicy()
        text, info = env.reset(seed=seed)
        expert.reset(text, info)
        text, _, _, _, info = env.step(expert.act(text, info))  # mid-episode
        calls.append(expert.act(text, info))
    outcomes: list[tuple[str, float]] = []
    killed = time.perf_counter()
    process.send_signal(signal.SIGKILL)
    process.wait()
    threads = [threading.Thread(target=_step_once, args=(env, call, killed, outcomes)) for env, call in zip(envs, calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * KILL_TIMEOUT_S)
    errors = sorted({name for name, _ in outcomes})
    seconds = [elapsed for _, elapsed in outcomes]
    typed = sum(name == RemoteEnvError.__name__ for name, _ in outcomes)
    return {"clients": clients, "client_timeout_s": KILL_TIMEOUT_S, "errors_raised": errors,
            "typed_errors": typed, "slowest_error_s": max(seconds, default=None),
            "all_typed_within_timeout": typed == clients and max(seconds, default=0) <= KILL_TIMEOUT_S}


def _step_once(env: Any, call: Any, killed: float, outcomes: list[tuple[str, float]]) -> None:
    """One step on a dead server; records the exception's class name (``"none"`` if it returned) and when."""
    try:
        env.step(call)
        name = "none"
    except Exception as error:  # noqa: BLE001  (any exception is the finding)
        name = type(error).__name__
    outcomes.append((name, time.perf_counter() - killed))


# ---------------------------------------------------------------------------------------------- attack
async def good_session(url: str, seconds: float, seed: int) -> dict[str, float]:
    """One well-behaved session stepping the expert for ``seconds`` (closed loop): its figures."""
    client, observation = await open_session(url, seed)
    start, stop, load = asyncio.Event(), asyncio.Event(), Load()
    task = asyncio.create_task(play(client, observation, start, stop, load, 0.0))
    began = time.perf_counter()
    start.set()
    await asyncio.sleep(seconds)
    stop.set()
    await task
    wall_s = time.perf_counter() - began
    await client.close()
    return figures(load, wall_s)


ATTACK_KINDS = ("heavy", "oversized", "dribble", "metadata")


def attacker(url: str, seconds: float, kinds: tuple[str, ...] = ATTACK_KINDS) -> None:
    """A hostile client for ``seconds`` (run in its own process) doing each of ``kinds``: ``heavy`` (messages
    near the size limit that fail validation, bad resets), ``oversized`` (over the limit, plain and
    compressible), ``dribble`` (100 half-sent handshakes), ``metadata`` (4 clients asking ``/metadata``)."""
    asyncio.run(_attack(url, seconds, kinds))


async def _attack(url: str, seconds: float, kinds: tuple[str, ...]) -> None:
    import json

    import httpx
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"
    items = FAT_MESSAGE_BYTES // 5 - 100
    messages = [  # each just under the limit, each failing validation in a different place
        json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "auth_info_form",
                                             "arguments": {"fields": ["x"] * items}}}),
        json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "make_phone_call", "arguments": {
            "phone_number": "1", "auth_info": {f"k{i}": 1 for i in range(FAT_MESSAGE_BYTES // 14)}}}}),
        json.dumps({"type": "step", "data": {f"u{i}": 0 for i in range(FAT_MESSAGE_BYTES // 14)}}),
        json.dumps({"type": "reset", "data": {"seed": -1, "options": [1] * items}}),
    ]
    oversized = "x" * (4 * FAT_MESSAGE_BYTES)
    bomb = json.dumps({"type": "step", "data": {"raw_text": " " * (16 * FAT_MESSAGE_BYTES)}})
    deadline = time.monotonic() + seconds

    async def heavy(message: str) -> None:
        async with connect(ws_url, max_size=None, open_timeout=30) as ws:
            while time.monotonic() < deadline:
                await ws.send(message)
                await ws.recv()

    async def refused(message: str) -> None:
        while time.monotonic() < deadline:
            try:
                async with connect(ws_url, max_size=None, open_timeout=30) as ws:
                    await ws.send(message)
                    await ws.recv()
            except Exception:  # noqa: BLE001, S110  (the server closing the socket is the point)
                pass

    async def dribble() -> None:
        host, port = url.removeprefix("http://").split(":")
        while time.monotonic() < deadline:
            try:
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"GET /ws HTTP/1.1\r\nHost: x\r\n")
                await asyncio.sleep(min(30.0, max(deadline - time.monotonic(), 0)))
                writer.close()
            except OSError:
                await asyncio.sleep(0.5)

    async def metadata() -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            while time.monotonic() < deadline:
                await http.get(f"{url}/metadata")

    tasks = {"heavy": [heavy(message) for message in messages], "oversized": [refused(oversized), refused(bomb)],
             "dribble": [dribble() for _ in range(100)], "metadata": [metadata() for _ in range(4)]}
    for kind in set(tasks) - set(kinds):
        for coroutine in tasks[kind]:
            coroutine.close()
    await asyncio.gather(*(task for kind in kinds for task in tasks[kind]), return_exceptions=True)


def attack_check(url: str, seconds: float, seed: int, kinds: tuple[str, ...] = ATTACK_KINDS) -> dict[str, Any]:
    """The good session's figures alone and beside :func:`attacker` (started 3 s ahead, in its own process so
    the measuring loop is not the attacker's)."""
    import multiprocessing

    alone = asyncio.run(good_session(url, seconds, seed))
    print(_line("good alone", alone))
    process = multiprocessing.get_context("spawn").Process(target=attacker, args=(url, seconds + 5.0, kinds))
    process.start()
    time.sleep(3.0)
    attacked = asyncio.run(good_session(url, seconds, seed))
    process.join(30)
    if process.is_alive():
        process.kill()
    print(_line("good attacked", attacked))
    ratio = attacked["p99_ms"] / alone["p99_ms"]
    return {"kinds": list(kinds), "alone": alone, "attacked": attacked, "p99_ratio": ratio,
            "goal_p99_ratio": GOAL_ATTACK_P99_RATIO, "goal_met": ratio <= GOAL_ATTACK_P99_RATIO}


async def fat_sessions(url: str, pid: int, sessions: int, idle_rss_mib: float) -> dict[str, Any]:
    """``sessions`` sessions (10 at a time), each a reset and :data:`FAT_MESSAGES` steps of about
    :data:`FAT_MESSAGE_BYTES` (an unreadable reply's raw text, which the env keeps a cut of), then closed: the
    server's RSS at the peak and a few seconds after the last closed, against the idle server's."""
    import json

    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"
    fat = json.dumps({"type": "step", "data": {"type": "call_tool", "invalid_reason": "no tool call",
                                               "raw_text": "y" * (FAT_MESSAGE_BYTES - 200)}})
    peak = idle_rss_mib

    async def one(seed: int) -> None:
        async with connect(ws_url, max_size=None, open_timeout=30) as ws:
            await ws.send(f'{{"type": "reset", "data": {{"seed": {seed}}}}}')
            await ws.recv()
            for _ in range(FAT_MESSAGES):
                await ws.send(fat)
                await ws.recv()

    for batch in range(0, sessions, 10):
        await asyncio.gather(*(one(seed) for seed in range(batch, min(batch + 10, sessions))))
        peak = max(peak, rss_mib(pid))
    while await asyncio.to_thread(active_sessions, url):
        await asyncio.sleep(0.1)
    await asyncio.sleep(3.0)
    after = rss_mib(pid)
    return {"sessions": sessions, "messages_per_session": FAT_MESSAGES, "message_bytes": len(fat),
            "idle_server_rss_mib": idle_rss_mib, "peak_server_rss_mib": peak, "server_rss_mib_after": after,
            "growth_mb": (after - idle_rss_mib) * 1.048576, "goal_growth_mb": GOAL_FAT_RSS_MB,
            "goal_met": (after - idle_rss_mib) * 1.048576 <= GOAL_FAT_RSS_MB}


def measure_attack(args: argparse.Namespace) -> dict[str, Any]:
    """The attack and fat-session checks against one server process."""
    process, url = start_server(DEFAULT_SERVER_SESSIONS)
    try:
        wait_ready(process, url)
        asyncio.run(load_level(url, process.pid, 1, min(args.seconds, 1.0), args.seed))  # warm up the server
        idle = rss_mib(process.pid)
        results: dict[str, Any] = {"attack": attack_check(url, args.seconds, args.seed)}
        results["attack_by_kind"] = [attack_check(url, args.seconds, args.seed, (kind,)) for kind in args.attack_kinds]
        results["fat_sessions"] = asyncio.run(fat_sessions(url, process.pid, args.fat_sessions, idle))
        print(f"fat sessions: {results['fat_sessions']}")
    finally:
        process.kill()
        process.wait()
    return results


# ---------------------------------------------------------------------------------------------- the run
def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every part of the benchmark, against one server process (killed at the end)."""
    process, url = start_server(max(max(args.sessions), args.leak_sessions) + 8)
    try:
        import openenv.core  # noqa: F401  (the clients' imports overlap the server's start)

        import worldgym.wrappers.openenv  # noqa: F401

        wait_ready(process, url)
        results: dict[str, Any] = {"in_process": in_process(args.seconds, args.seed)}
        print(_line("in-process", results["in_process"]))
        asyncio.run(load_level(url, process.pid, 1, min(args.seconds, 1.0), args.seed))  # warm up the server
        results["idle_server_rss_mib"] = rss_mib(process.pid)
        results["closed_loop"] = [run_level(url, process.pid, n, args, results) for n in args.sessions]
        results["paced"] = run_level(url, process.pid, max(args.sessions), args, results, args.think_ms / 1000)
        results["leak_check"] = asyncio.run(leak_check(url, process.pid, args.leak_sessions,
                                                          results["idle_server_rss_mib"]))
        print(f"leak check: {results['leak_check']}")
        results["server_kill"] = kill_check(process, url, args.kill_clients)
        print(f"server kill: {results['server_kill']}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return results


def run_level(url: str, pid: int, sessions: int, args: argparse.Namespace, results: dict[str, Any],
              think_s: float = 0.0) -> dict[str, float]:
    """One load level (see :func:`load_level`) with its memory per session; prints its figures."""
    level = asyncio.run(load_level(url, pid, sessions, args.seconds, args.seed, think_s))
    level["mib_per_session"] = (level["server_rss_mib"] - results["idle_server_rss_mib"]) / sessions
    name = f"{sessions} sessions" + (f", {level['think_ms']:g} ms pause" if think_s else "")
    print(_line(name, level) + f"; cores used: server {level['server_cores_used']:.2f}, clients "
          f"{level['client_cores_used']:.2f}; {level['mib_per_session']:.3f} MiB/session")
    return level


def _line(name: str, row: dict[str, float]) -> str:
    return (f"{name:>13}: {row['steps_per_s']:>8,.0f} steps/s, p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} "
            f"ms, {row['episodes']} episodes, success {row['success_rate']:.1%}")


def verdicts(results: dict[str, Any]) -> dict[str, Any]:
    """Sessions per core (closed loop and paced) and whether each goal was met."""
    meeting = [row for row in results["closed_loop"] if row["p99_ms"] < GOAL_P99_MS]
    best = max(meeting, key=lambda row: row["sessions"], default=None)
    paced = results["paced"]
    closed_per_core = None if best is None else best["sessions"] / max(best["server_cores_used"], 1.0)
    paced_per_core = paced["sessions"] / max(paced["server_cores_used"], 1.0) if paced["p99_ms"] < GOAL_P99_MS else None
    return {
        "largest_closed_loop_level_meeting_p99": None if best is None else best["sessions"],
        "sessions_per_core_closed_loop": closed_per_core,
        "sessions_per_core_paced": paced_per_core,
        "goal_sessions_per_core_met_closed_loop": (closed_per_core or 0) >= GOAL_SESSIONS_PER_CORE,
        "goal_sessions_per_core_met_paced": (paced_per_core or 0) >= GOAL_SESSIONS_PER_CORE,
        "goal_no_leaks_met": results["leak_check"]["leaked_sessions"] == 0,
        "goal_kill_met": results["server_kill"]["all_typed_within_timeout"],
    }


def plot(results: dict[str, Any], path: Path) -> None:
    """p50 / p99 step latency against concurrent sessions (log-log), with the in-process figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sessions = [row["sessions"] for row in results["closed_loop"]]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key, style in (("p50_ms", "o-"), ("p99_ms", "s-")):
        ax.plot(sessions, [row[key] for row in results["closed_loop"]], style, label=f"server {key[:3]}, no pause")
        ax.axhline(results["in_process"][key], ls=":", color=ax.lines[-1].get_color(), label=f"in-process {key[:3]}")
    paced = results["paced"]
    ax.plot([paced["sessions"]] * 2, [paced["p50_ms"], paced["p99_ms"]], "k^", ms=5,
            label=f"server p50/p99, {paced['think_ms']:g} ms pause")
    ax.axhline(GOAL_P99_MS, color="red", lw=0.8, label=f"goal p99 < {GOAL_P99_MS:g} ms")
    ax.set(xscale="log", yscale="log", xlabel="concurrent sessions", ylabel="step latency (ms)",
           title=f"worldgym serve {ENV_ID} (CPU, {os.cpu_count()} cores)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--sessions", type=int, nargs="+", default=None,
                        help="concurrent session counts (default 1 64 256; 1 8 with --quick)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of stepping per session count (default 15; 0.5 with --quick)")
    parser.add_argument("--think-ms", type=float, default=None,
                        help="the paced level's pause between a session's steps, as an agent choosing its next call "
                             "(default 500; 50 with --quick)")
    parser.add_argument("--leak-sessions", type=int, default=None,
                        help="sessions opened and dropped by the leak check (default 1000; 50 with --quick)")
    parser.add_argument("--kill-clients", type=int, default=None,
                        help="OpenEnvGym clients when the server is killed (default 32; 4 with --quick)")
    parser.add_argument("--attack", action="store_true",
                        help="run only the attack and fat-session checks (writes serve_attack.json)")
    parser.add_argument("--attack-kinds", nargs="*", default=[], choices=ATTACK_KINDS,
                        help="with --attack, also run the attacker with each of these kinds alone")
    parser.add_argument("--fat-sessions", type=int, default=None,
                        help="sessions of the fat-session memory check (default 100; 10 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    defaults = {"sessions": ([1, 8], [1, 64, 256]), "seconds": (0.5, 15.0), "leak_sessions": (50, 1000),
                "kill_clients": (4, 32), "think_ms": (50.0, 500.0), "fat_sessions": (10, 100)}
    for name, (quick, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if min(args.sessions) < 1 or args.seconds <= 0 or args.leak_sessions < 1 or args.kill_clients < 1 or args.think_ms <= 0:
        parser.error("--sessions, --leak-sessions and --kill-clients must be >= 1, --seconds and --think-ms > 0")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run the benchmark, print the figures and write JSON (and a PNG)."""
    args = parse_args(argv)
    if importlib.util.find_spec("openenv") is None:
        print("skipped: openenv-core is not installed (the interop extra: pip install 'worldgym[interop]')")
        return None
    results: dict[str, Any] = {
        "env": f"{ENV_ID} (difficulty drawn per episode), scripted expert, no pause between steps",
        "quick": args.quick,
        "server": f"python -m worldgym serve {ENV_ID} (own process, uvicorn, one event loop)",
        "client": "openenv-core GenericEnvClient (async, one WebSocket session each, all on one asyncio loop in the "
                  "benchmark process); the kill check uses worldgym's OpenEnvGym (one thread each)",
        "latency": "per step, request sent to observation received, as the client sees it",
        "goals": {"sessions_per_core": GOAL_SESSIONS_PER_CORE, "p99_ms": GOAL_P99_MS, "leaked_sessions": 0},
        "seconds_per_level": args.seconds,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
    }
    out = results_dir(args)
    if args.attack:
        results |= measure_attack(args)
        results["load_average_after"] = os.getloadavg()[0]
        write_json(out / "serve_attack.json", results, indent=2)
        return results
    results |= measure(args)
    results["load_average_after"] = os.getloadavg()[0]
    results |= verdicts(results)
    _print_verdicts(results)
    plot(results, out / "serve_load.png")
    write_json(out / "serve_load.json", results, indent=2)
    return results


def _print_verdicts(results: dict[str, Any]) -> None:
    verdict: Callable[[bool], str] = {True: "met", False: "NOT met"}.__getitem__

    def per_core(value: float | None) -> str:
        return "no level met the p99" if value is None else f"{value:.0f} sessions per core"

    print(f"goal >= {GOAL_SESSIONS_PER_CORE} sessions per core at p99 < {GOAL_P99_MS:g} ms: no pause "
          f"{verdict(results['goal_sessions_per_core_met_closed_loop'])} "
          f"({per_core(results['sessions_per_core_closed_loop'])}), {results['paced']['think_ms']:g} ms pause "
          f"{verdict(results['goal_sessions_per_core_met_paced'])} ({per_core(results['sessions_per_core_paced'])}); "
          f"no leaked sessions: {verdict(results['goal_no_leaks_met'])}; typed error on a server kill: "
          f"{verdict(results['goal_kill_met'])} (load average {results['load_average_before']:.2f} -> "
          f"{results['load_average_after']:.2f} on {results['cpu_count']} cores)")


if __name__ == "__main__":
    main()
