"""``worldgym serve`` / ``create_app`` through openenv-core's own clients: the same episode as in-process, bad
actions answered with the env's error observation (never a 500), isolated sessions freed on disconnect or after
idling, capacity."""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("openenv", reason="needs the interop extra (openenv-core)")

from fastapi.testclient import TestClient
from openenv.core import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.csr_phone.env import CSR_TOOLS
from worldgym.envs.csr_phone.policies import ExpertPolicy
from worldgym.errors import ConfigError
from worldgym.serve import create_app
from worldgym.serve.environment import jsonable
from worldgym.serve.info import client_info
from worldgym.serve.models import ToolAction
from worldgym.spaces import ToolCall, ToolCallError


@pytest.fixture(scope="module")
def csr_url(serve_app) -> str:
    return serve_app(create_app("CSRPhone-v1", max_sessions=64))


def _served(info: dict[str, Any], env_id: str = "CSRPhone-v1") -> dict[str, Any]:
    """``info`` as the server sends it: the keys a client may read, as JSON."""
    return jsonable(client_info(env_id, info))


def _call(call: ToolCall) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": call.name, "arguments": dict(call.arguments)}


def _sessions(url: str) -> int:
    import httpx

    return httpx.get(f"{url}/sessions", timeout=5).json()["active"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expert_episode_over_the_wire_matches_in_process(csr_url, seed):
    local = gym.make("CSRPhone-v1")
    expected_text, expected_info = local.reset(seed=seed)
    expert = ExpertPolicy()
    expert.reset(expected_text, expected_info)
    with GenericEnvClient(base_url=csr_url).sync() as remote:
        result = remote.reset(seed=seed)
        assert (result.observation["text"], result.observation["info"]) == (expected_text, _served(expected_info))
        done = False
        while not done:
            call = expert.act(expected_text, expected_info)
            expected_text, reward, terminated, truncated, expected_info = local.step(call)
            result = remote.step(_call(call))
            observation = result.observation
            assert observation["text"] == observation["result"] == expected_text
            assert observation["info"] == _served(expected_info)
            assert (result.reward, result.done, observation["truncated"]) == (
                reward, terminated or truncated, truncated)
            done = result.done
    assert observation["info"]["success"] is True and result.reward == 1.0


def test_mcp_tool_client_lists_the_tools_and_calls_them(csr_url):
    with MCPToolClient(base_url=csr_url).sync() as client:
        tools = client.list_tools()  # before any reset, as MCP allows
        assert [(t.name, t.description, t.input_schema) for t in tools] == [
            (t.name, t.description, dict(t.parameters)) for t in CSR_TOOLS]
        client.reset(seed=3)
        local = gym.make("CSRPhone-v1")
        _, info = local.reset(seed=3)
        call = ToolCall("search_company", {"company": info["company"]})
        assert client.call_tool(call.name, **call.arguments) == local.step(call)[0]


BAD_CALLS = [
    ToolCall("serach_company", {"company": "Acme"}),  # unknown tool
    ToolCall("search_company", {"company": 5}),  # wrong argument type
    ToolCall("make_phone_call", {"phone_number": "1", "pin": "0000"}),  # unexpected argument
    ToolCall("search_company", ["Acme"]),  # arguments not an object
    ToolCall(7, {}),  # a name that is not a string
    ToolCallError("no <tool_call>...</tool_call> block found in the reply", "Hello!"),
]


def _payload(action: ToolCall | ToolCallError) -> dict[str, Any]:
    if isinstance(action, ToolCallError):
        return {"type": "call_tool", "invalid_reason": action.message, "raw_text": action.raw_text}
    return {"type": "call_tool", "tool_name": action.name, "arguments": action.arguments}


def test_bad_actions_get_the_in_process_error_observation_and_the_episode_goes_on(csr_url):
    local = gym.make("CSRPhone-v1")
    text, info = local.reset(seed=4)
    with GenericEnvClient(base_url=csr_url).sync() as remote:
        remote.reset(seed=4)
        for action in BAD_CALLS:
            expected = local.step(action)
            result = remote.step(_payload(action))
            assert (result.observation["text"], result.reward, result.done) == expected[0:2] + (False,)
            assert result.observation["info"] == _served(expected[4])
            assert expected[4]["response_type"] == "invalid_call"
        expert = ExpertPolicy()
        expert.reset(text, info)
        result = remote.step(_call(expert.act(text, info)))  # the episode goes on
        assert result.observation["info"]["response_type"] != "invalid_call"


def test_http_serves_only_stateless_routes_and_never_answers_500():
    client = TestClient(create_app("CSRPhone-v1"))
    assert client.get("/health").json() == {"status": "healthy"}
    assert client.get("/metadata").json()["name"] == "CSRPhone-v1"
    assert "invalid_reason" in client.get("/schema").json()["action"]["properties"]
    assert client.get("/sessions").json() == {"active": 0, "max": 256}
    # Episodes run over /ws only: nothing over HTTP creates, steps, reads or closes a session.
    for method, path in [("POST", "/reset"), ("POST", "/step"), ("GET", "/state"), ("POST", "/mcp"),
                         ("GET", "/docs"), ("GET", "/openapi.json")]:
        assert client.request(method, path, json={"method": "openenv/session/create"}).status_code in (404, 405)


def test_a_text_env_takes_text_actions(serve_app):
    url = serve_app(create_app("MathQA-v1", num_problems=20))
    local = gym.make("MathQA-v1", num_problems=20)
    _, info = local.reset(seed=5)
    answer = f"#### {local.unwrapped._problem.answer_text}"
    with GenericEnvClient(base_url=url).sync() as remote:
        assert remote.reset(seed=5).observation["info"] == _served(info, "MathQA-v1")
        result = remote.step({"text": answer})
        assert (result.reward, result.done, result.observation["info"]["success"]) == (1.0, True, True)
        assert remote.step({"text": answer}).observation["info"]["response_type"] == "reset_needed"
        remote.reset(seed=5)
        invalid = remote.step({"text": 42})  # not a string: the env's invalid answer, as in-process
        assert invalid.observation["info"]["errors"] == ["expected the answer as a string, got int"]


def test_sessions_are_isolated_and_freed_when_clients_leave(wait_for, csr_url):
    clients = [GenericEnvClient(base_url=csr_url).sync() for _ in range(6)]
    prompts = [client.connect().reset(seed=seed).observation["text"] for seed, client in enumerate(clients)]
    assert prompts == [gym.make("CSRPhone-v1").reset(seed=seed)[0] for seed in range(6)]
    assert _sessions(csr_url) == 6
    for client in clients[:3]:
        client.close()  # a clean goodbye
    assert wait_for(lambda: _sessions(csr_url) == 3, 5)
    ws_url = csr_url.replace("http://", "ws://") + "/ws"
    with contextlib.ExitStack() as stack:
        raw = [stack.enter_context(ws_connect(ws_url)) for _ in range(20)]
        for ws in raw:
            ws.send('{"type": "reset", "data": {"seed": 1}}')
            ws.recv(timeout=10)
        assert _sessions(csr_url) == 23
        for ws in raw:
            ws.socket.shutdown(socket.SHUT_RDWR)  # the client vanishes without a close frame
    assert wait_for(lambda: _sessions(csr_url) == 3, 5)
    for client in clients[3:]:
        client.close()
    assert wait_for(lambda: _sessions(csr_url) == 0, 5)


def test_idle_sessions_expire_and_capacity_is_enforced(wait_for, serve_app):
    url = serve_app(create_app("CSRPhone-v1", max_sessions=1, session_timeout=0.5))
    ws_url = url.replace("http://", "ws://") + "/ws"
    with ws_connect(ws_url) as first:
        first.send('{"type": "reset", "data": {"seed": 0}}')
        assert json.loads(first.recv(timeout=10))["type"] == "observation"
        with ws_connect(ws_url) as second:  # the server speaks first, then closes
            refusal = json.loads(second.recv(timeout=10))
        assert (refusal["type"], refusal["data"]["code"]) == ("error", "CAPACITY_REACHED")
        with pytest.raises(ConnectionClosed) as closed:  # silent past the timeout: the server closes the socket
            first.recv(timeout=10)
        assert closed.value.rcvd.code == 1001 and "idle" in closed.value.rcvd.reason
    assert wait_for(lambda: _sessions(url) == 0, 5)


def test_create_app_rejects_what_it_cannot_serve():
    with pytest.raises(TypeError, match="text or tool-call env"):
        create_app("ZTokenDigits-v1")
    with pytest.raises(ValueError, match="max_sessions must be an int >= 1, got 0"):
        create_app("CSRPhone-v1", max_sessions=0)
    with pytest.raises(ConfigError, match="difficulty=9 is invalid: use one of"):
        create_app("CSRPhone-v1", difficulty=9)


def test_an_env_failure_ends_the_episode_with_an_error_observation(monkeypatch, caplog):
    from worldgym.serve.environment import GymEnvironment

    env = GymEnvironment("CSRPhone-v1")
    env.reset(seed=0)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("/srv/secret/state.db is locked")

    monkeypatch.setattr(env._env, "step", broken)
    failed = env.step(ToolAction(tool_name="search_company", arguments={"company": "x"}))
    assert failed.done and failed.info["response_type"] == "env_error" and "/srv" not in failed.text
    assert env.step(ToolAction(tool_name="search_company", arguments={"company": "x"})).info["response_type"] == \
        "reset_needed"
    monkeypatch.setattr(env._env, "reset", broken)
    assert env.reset(seed=1).info["response_type"] == "env_error"
    assert sum("/srv/secret" in record.exc_text for record in caplog.records if record.exc_text) == 2
