"""``OpenEnvGym`` / ``gym.make("worldgym/OpenEnv-v0", base_url=...)``: worldgym's servers and others' as Gymnasium
envs (check_env, the in-process trajectory through ParseToolCall), and typed errors, never hangs, when the server
is unreachable, killed or silent."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from typing import Any

import gymnasium as gym
import httpx
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("openenv", reason="needs the interop extra (openenv-core)")

from openenv.core.env_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)
from openenv.core.env_server.mcp_types import Tool as MCPTool
from openenv.core.env_server.types import Action, Observation, State

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.csr_phone.policies import ExpertPolicy, TextPolicy
from worldgym.errors import RemoteEnvError, RemoteEnvSchemaError
from worldgym.serve import create_app
from worldgym.serve.environment import jsonable
from worldgym.serve.info import client_info
from worldgym.spaces import ToolCall, ToolCallSpace
from worldgym.wrappers import ParseToolCall
from worldgym.wrappers.openenv import OpenEnvGym


@pytest.fixture(scope="module")
def csr_url(serve_app) -> str:
    return serve_app(create_app("CSRPhone-v1"))


def test_a_worldgym_tool_server_passes_check_env(csr_url):
    env = gym.make("worldgym/OpenEnv-v0", base_url=csr_url)
    assert isinstance(env.action_space, ToolCallSpace) and env.unwrapped.is_worldgym_server
    assert env.action_space == gym.make("CSRPhone-v1").action_space
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_a_worldgym_text_server_passes_check_env(serve_app):
    env = OpenEnvGym(serve_app(create_app("MathQA-v1", num_problems=20)))
    assert isinstance(env.action_space, gym.spaces.Text)
    check_env(env, skip_render_check=True)
    env.close()


def _trajectory(env: gym.Env, seed: int, replies: list[str]) -> list[tuple]:
    """The reset, the malformed ``replies``, then the scripted expert's text to the end of the episode."""
    observation, info = env.reset(seed=seed)
    steps: list[tuple] = [(observation, info)]
    policy = TextPolicy(ExpertPolicy())
    policy.reset(observation, info)
    for reply in replies:
        steps.append(env.step(reply))
    terminated = truncated = False
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(policy.act(observation, info))
        steps.append((observation, reward, terminated, truncated, info))
    return steps


MALFORMED = ["Hello!", '<tool_call>{"name": "search_company", "arguments": {"company": NaN}}</tool_call>',
             '<tool_call>{"name": "search_company", "arguments": {"company": 3}}</tool_call>']


@pytest.mark.parametrize("seed", [0, 1])
def test_parse_tool_call_over_the_wire_gives_the_in_process_trajectory(csr_url, seed):
    remote = ParseToolCall(gym.make("worldgym/OpenEnv-v0", base_url=csr_url))
    expected = [(*step[:-1], jsonable(client_info("CSRPhone-v1", step[-1])))
                for step in _trajectory(ParseToolCall(gym.make("CSRPhone-v1")), seed, MALFORMED)]
    got = _trajectory(remote, seed, MALFORMED)
    assert got == expected
    assert [step[-1]["response_type"] for step in got[1:4]] == ["invalid_call"] * 3
    assert got[-1][-1]["success"] is True and got[-1][1] == 1.0
    with pytest.raises(gym.error.ResetNeeded):
        remote.step("<tool_call>{}</tool_call>")
    remote.close()


class _EchoMCP(Environment):
    """Someone else's MCP server: one tool, ``echo(message)``, whose result is MCP content; done after 3 calls."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self.calls = 0
        return Observation(done=False, reward=None)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, ListToolsAction):
            schema = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
            return ListToolsObservation(tools=[MCPTool(name="echo", description="Echo.", input_schema=schema)])
        self.calls += 1
        message = action.arguments.get("message")
        return CallToolObservation(tool_name=action.tool_name, result={"content": [{"type": "text", "text": message}]},
                                   done=self.calls >= 3, reward=float(self.calls))

    @property
    def state(self) -> State:
        return State(step_count=self.calls)


class _ShoutAction(Action):
    message: str


class _Shout(Environment):
    """Someone else's text server: the action is one field, ``message``; the reply is it in capitals."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=None)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return CallToolObservation(tool_name="shout", result=action.message.upper(), done=True, reward=1.0)

    @property
    def state(self) -> State:
        return State()


def test_another_mcp_server_becomes_a_tool_env(serve_app):
    env = OpenEnvGym(serve_app(create_fastapi_app(_EchoMCP, CallToolAction, CallToolObservation,
                                                  max_concurrent_envs=4)))
    assert list(env.action_space.tools) == ["echo"] and not env.is_worldgym_server
    assert env.reset(seed=0) == ("", {"observation": {}})
    text, reward, terminated, _, info = env.step(ToolCall("echo", {"message": "hi"}))
    assert (text, reward, terminated, info["success"]) == ("hi", 1.0, False, False)
    local = ParseToolCall(env).step("no call")  # never sent: that server cannot be told of unreadable text
    assert local[0].startswith("Error: invalid tool call.") and local[4]["response_type"] == "invalid_call"
    env.step(ToolCall("echo", {"message": "b"}))
    assert env.step(ToolCall("echo", {"message": "c"}))[2] is True  # that server's third call ends it
    env.close()


def test_another_one_field_server_becomes_a_text_env(serve_app):
    env = OpenEnvGym(serve_app(create_fastapi_app(_Shout, _ShoutAction, CallToolObservation)))
    assert isinstance(env.action_space, gym.spaces.Text)
    env.reset()
    assert env.step("hello")[:3] == ("HELLO", 1.0, True)
    env.close()


def test_unsupported_actions_and_unreachable_servers_raise_typed_errors(serve_app):
    class _TwoFields(Action):
        x: int
        y: int

    url = serve_app(create_fastapi_app(_Shout, _TwoFields, CallToolObservation))
    with pytest.raises(RemoteEnvSchemaError, match=r"action fields \['x', 'y'\]"):
        OpenEnvGym(url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="could not connect"):
        OpenEnvGym(f"http://127.0.0.1:{port}", connect_timeout_s=2)
    assert time.monotonic() - start < 5
    with pytest.raises(ValueError, match="base_url must be an http"):
        OpenEnvGym("localhost:8000")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve_from_the_command_line(port: int) -> None:
    from worldgym.__main__ import main

    main(["serve", "CSRPhone-v1", "--port", str(port), "--env-kwargs", '{"difficulty": 2}'])


def _start_server_process(port: int) -> multiprocessing.Process:
    """``worldgym serve CSRPhone-v1`` (its command line's ``main``) in a forked process, which starts without
    importing openenv again (seconds on a busy machine)."""
    process = multiprocessing.get_context("fork").Process(target=_serve_from_the_command_line, args=(port,),
                                                          daemon=True)
    process.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("worldgym serve did not come up within 30 s")


def test_a_killed_or_silent_server_raises_a_typed_error_within_the_timeout():
    port = _free_port()
    process = _start_server_process(port)
    try:
        envs = [OpenEnvGym(f"http://127.0.0.1:{port}", timeout_s=2) for _ in range(3)]
        for seed, env in enumerate(envs):
            assert env.reset(seed=seed)[1]["difficulty"] == 2  # --env-kwargs reached the env
        os.kill(process.pid, signal.SIGSTOP)  # alive but silent
        start = time.monotonic()
        with pytest.raises(RemoteEnvError, match="step failed"):
            envs[0].step(ToolCall("search_company", {"company": "x"}))
        assert 1.5 < time.monotonic() - start < 5
        process.kill()  # gone mid-episode
        os.kill(process.pid, signal.SIGCONT)
        process.join(timeout=10)
        for env in envs[1:]:
            start = time.monotonic()
            with pytest.raises(RemoteEnvError):
                env.step(ToolCall("search_company", {"company": "x"}))
            assert time.monotonic() - start < 3
        with pytest.raises(RemoteEnvError, match="could not connect"):
            envs[0].reset()  # reset connects again, and says so when it cannot
    finally:
        process.kill()
        process.join(timeout=10)
