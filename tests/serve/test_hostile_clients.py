"""``worldgym serve`` against hostile and careless clients, over real sockets on 127.0.0.1: what one client sends
must not make the server slow, full, starved or talkative for the others. Every socket has a timeout."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("openenv", reason="needs the interop extra (openenv-core)")

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.__main__ import main as worldgym_command
from worldgym.errors import RemoteEnvError
from worldgym.serve import create_app
from worldgym.serve.app import build_server, check_exposure
from worldgym.serve.environment import GymEnvironment, action_kind
from worldgym.serve.info import CLIENT_INFO_KEYS
from worldgym.serve.session import MAX_LISTED_ERRORS
from worldgym.serve.transport import OneLineAcceptErrors
from worldgym.wrappers.openenv import OpenEnvGym

LIMIT = 256 * 1024  # the test servers' message limit
TOKEN = "s3cret-token-for-tests-only"


@contextlib.contextmanager
def _running(**options: Any) -> Iterator[str]:
    """A CSRPhone-v1 ``build_server`` in a thread on a free localhost port; its ``http://`` URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    options = {"max_message_bytes": LIMIT, "max_sessions": 8, "session_timeout": 30.0, **options}
    server = build_server("CSRPhone-v1", "127.0.0.1", sock.getsockname()[1], **options)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start within 20 s"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with _running() as running:
        yield running


def _ws(url: str, **kwargs: Any) -> ClientConnection:
    return ws_connect(url.replace("http://", "ws://") + "/ws", open_timeout=5, close_timeout=2, max_size=None,
                      **kwargs)


def _ask(ws: ClientConnection, message: dict[str, Any] | str | bytes, timeout: float = 10) -> dict[str, Any]:
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=timeout))


def _sessions(url: str) -> int:
    return httpx.get(f"{url}/sessions", timeout=5).json()["active"]


# ------------------------------------------------------------------- 1. amplification
def test_a_cheap_message_gets_a_small_answer_and_never_its_input_back(url):
    with _ws(url) as ws:
        _ask(ws, {"type": "reset", "data": {"seed": 0}})
        calls = [{"tool_name": "auth_info_form", "arguments": {"fields": ["x"] * 40_000}},  # maxItems 16
                 {"tool_name": "search_company", "arguments": {f"k{i}": 0 for i in range(15_000)}},
                 {"tool_name": "make_phone_call", "arguments": {"phone_number": "1", "auth_info": {
                     f"secret{i}": "v" for i in range(10_000)}}}]
        for call in calls:
            raw = json.dumps({"type": "step", "data": {"type": "call_tool", **call}})
            reply = _ask(ws, raw)
            assert reply["type"] == "observation" and reply["data"]["observation"]["info"]["response_type"] == \
                "invalid_call"
            assert len(json.dumps(reply)) < 20_000 and len(reply["data"]["observation"]["info"]["errors"]) <= 11
        unknown = _ask(ws, {"type": "step", "data": {f"bogus{i}": "payload" for i in range(8_000)}})
        assert unknown["data"]["code"] == "VALIDATION_ERROR" and "8000 unknown action field(s)" in \
            unknown["data"]["message"]
        assert len(json.dumps(unknown)) < 1000 and "payload" not in json.dumps(unknown)
        wrong = _ask(ws, {"type": "step", "data": {"type": ["payload"] * 1000, "raw_text": {"payload": 1}}})
        assert wrong["data"]["code"] == "VALIDATION_ERROR" and "payload" not in json.dumps(wrong)
        assert len(wrong["data"]["errors"]) <= MAX_LISTED_ERRORS


def test_oversized_messages_close_only_their_own_socket_and_nothing_is_compressed(url):
    with _ws(url) as good:
        assert _ask(good, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        assert "Sec-WebSocket-Extensions" not in good.response.headers  # permessage-deflate declined: no bombs
        for payload in ["x" * (LIMIT + 1), json.dumps({"type": "step", "data": {"text": " " * (20 * LIMIT)}})]:
            with _ws(url) as bad:
                with contextlib.suppress(OSError, ConnectionClosed):  # the server may close mid-message
                    bad.send(payload)
                with pytest.raises(ConnectionClosed) as closed:
                    bad.recv(timeout=10)
                assert closed.value.rcvd is None or closed.value.rcvd.code == 1009
        assert _ask(good, {"type": "state"})["type"] == "state"  # the good session goes on


def test_a_heavy_message_does_not_stall_another_session(url):
    with _ws(url) as good, _ws(url) as bad:
        _ask(good, {"type": "reset", "data": {"seed": 2}})
        _ask(bad, {"type": "reset", "data": {"seed": 2}})
        heavy = json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "auth_info_form",
                                                     "arguments": {"fields": [[[1]]] * 25_000}}})
        timings = []
        for _ in range(5):
            bad.send(heavy)
            start = time.perf_counter()
            _ask(good, {"type": "state"})
            timings.append(time.perf_counter() - start)
            bad.recv(timeout=10)
        assert min(timings) < 1.0, timings


# ------------------------------------------------------------------- 3. sessions a client does not own
def test_sessions_belong_to_their_socket_and_have_no_http_handle(wait_for, url):
    for method in ("openenv/session/create", "openenv/session/close", "tools/list"):
        response = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                  "params": {"session_id": "x"}}, timeout=5)
        assert response.status_code in (404, 405)
    assert httpx.post(f"{url}/reset", json={}, timeout=5).status_code in (404, 405)
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(_ws(url)) for _ in range(5)]
        assert _sessions(url) == 5  # open sockets are sessions, even before a reset
        reply = _ask(sockets[0], {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 1,
                                                          "method": "openenv/session/close", "params": {}}})
        assert reply["data"]["code"] == "UNKNOWN_TYPE"
        state = _ask(sockets[1], {"type": "state"})["data"]
        assert "session_id" not in json.dumps(state)
    assert wait_for(lambda: _sessions(url) == 0, 5)


def test_capacity_counts_sockets_and_frees_with_them(wait_for):
    with _running(max_sessions=3) as url, contextlib.ExitStack() as stack:
        held = [stack.enter_context(_ws(url)) for _ in range(3)]
        with _ws(url) as refused:
            assert json.loads(refused.recv(timeout=5))["data"]["code"] == "CAPACITY_REACHED"
        held[0].close()
        assert wait_for(lambda: _sessions(url) == 2, 5)
        with _ws(url) as admitted:
            assert _ask(admitted, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"


# ------------------------------------------------------------------- 4. slow clients
def test_dribbled_handshakes_are_closed_and_connections_are_bounded(wait_for, caplog):
    caplog.set_level(logging.WARNING)
    with _running(handshake_timeout=3.0, max_connections=16) as url, contextlib.ExitStack() as stack:
        port = int(url.rsplit(":", 1)[1])
        dribblers = []
        for _ in range(12):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n")  # never finished
            dribblers.append(sock)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # room left under the limit
        with contextlib.ExitStack() as more:  # fill past the limit: the next request gets 503 at once
            for _ in range(8):
                more.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            assert httpx.get(f"{url}/health", timeout=5).status_code == 503
        for sock in dribblers:  # closed by the server within the handshake timeout
            assert sock.recv(1024) == b""
        assert wait_for(lambda: httpx.get(f"{url}/health", timeout=5).status_code == 200, 5)
    lines = [record for record in caplog.records if "no request headers within" in record.getMessage()]
    assert len(lines) >= 12 and not any(record.exc_info for record in caplog.records)


def test_running_out_of_descriptors_logs_one_line_not_a_traceback():
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        record = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "socket.accept() out of system resource",
                                   None, sys.exc_info())
    assert OneLineAcceptErrors().filter(record) and record.exc_info is None
    assert logging.Formatter().format(record) == "socket.accept() out of system resource: [Errno 24] Too many open files"


# ------------------------------------------------------------------- 5. bad input: 4xx or an error observation
@pytest.mark.parametrize("data", [{"seed": -1}, {"seed": "7"}, {"seed": 1e999}, {"seed": 2**70}, {"seed": True},
                                  {"options": [1, 2]}, {"options": "x"},
                                  {"episode_id": "e" * 10_000}, {"episode_id": 5}])
def test_bad_reset_arguments_get_the_documented_error_observation(url, data):
    with _ws(url) as ws:
        raw = json.dumps({"type": "reset", "data": data}).replace("Infinity", "1e999")
        reply = _ask(ws, raw)
        assert reply["type"] == "observation" and reply["data"]["done"] is True
        info = reply["data"]["observation"]["info"]
        assert info["response_type"] == "reset_failed" and len(json.dumps(info)) < 600
        step = _ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "search_company",
                                                  "arguments": {"company": "x"}}})
        assert step["data"]["observation"]["info"]["response_type"] == "reset_needed"
        assert _ask(ws, {"type": "reset", "data": {"seed": 3}})["data"]["done"] is False  # nothing corrupted


def test_lone_surrogates_and_broken_json_still_get_an_answer(url):
    with _ws(url) as ws:
        _ask(ws, {"type": "reset", "data": {"seed": 0}})
        surrogate = '{"type": "step", "data": {"type": "call_tool", "tool_name": "\\ud800", "arguments": {}}}'
        reply = _ask(ws, surrogate)
        assert reply["type"] == "observation" and reply["data"]["observation"]["info"]["turn"] == 1
        bad_text = '{"type": "step", "data": {"invalid_reason": "x\\udfff", "raw_text": "\\ud800"}}'
        assert _ask(ws, bad_text)["data"]["observation"]["info"]["turn"] == 2
        for raw in ["{", "[" * 100_000, "1" * 5000, '"just a string"', b"\xff\xfe"]:
            assert _ask(ws, raw)["data"]["code"] == "INVALID_JSON"
        assert _ask(ws, {"type": "step", "data": [1]})["data"]["code"] == "VALIDATION_ERROR"
        assert _ask(ws, {"type": 5})["data"]["code"] == "UNKNOWN_TYPE"


def test_http_bodies_are_bounded_before_they_are_read(url):
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 268435456\r\n\r\n" + b"x" * 1000)
        assert sock.recv(1024).startswith(b"HTTP/1.1 413")
    chunked = httpx.post(f"{url}/health", content=iter([b"x" * 65536] * 64), timeout=10)  # no Content-Length
    assert chunked.status_code == 405  # no route reads a body: refused unread


# ------------------------------------------------------------------- 6. what leaves the server
SERVABLE = {"CSRPhone-v1": {}, "MathQA-v1": {"num_problems": 5}, "LongHealthQA-v0": {}, "ReasoningGym-v0": {}}


def test_every_servable_env_has_decided_its_client_info_keys():
    servable = []
    for env_id, spec in gym.registry.items():
        if not str(spec.entry_point).startswith("worldgym.") or env_id in ("worldgym/OpenEnv-v0", "GameBoy-v0"):
            continue
        with contextlib.closing(gym.make(env_id)) as env:
            with contextlib.suppress(TypeError):
                action_kind(env)
                servable.append(env_id)
    assert set(servable) <= set(CLIENT_INFO_KEYS) and "CSRPhone-v1" in servable


@pytest.mark.parametrize("env_id", sorted(SERVABLE))
def test_no_answer_leaves_the_server(serve_app, env_id):
    try:
        app = create_app(env_id, **SERVABLE[env_id])
    except ImportError as error:
        pytest.skip(f"{env_id} needs an optional dependency: {error}")
    url = serve_app(app)
    local = gym.make(env_id, **SERVABLE[env_id])
    _, secret_info = local.reset(seed=0)
    with _ws(url) as ws:
        reset = _ask(ws, {"type": "reset", "data": {"seed": 0}})["data"]["observation"]
        action = ({"type": "call_tool", "tool_name": "search_company", "arguments": {"company": "x"}}
                  if env_id == "CSRPhone-v1" else {"text": "<answer>A</answer> #### 1"})
        step = _ask(ws, {"type": "step", "data": action})["data"]["observation"]
    for info in (reset["info"], step["info"]):
        assert set(info) <= CLIENT_INFO_KEYS[env_id]
        assert not {"answer", "answer_text", "raw_text"} & set(info)
    if env_id == "LongHealthQA-v0":  # the correct option's text appears only among the options
        assert secret_info["answer_text"] not in json.dumps({k: v for k, v in reset["info"].items()
                                                              if k != "options"})


def test_a_failing_factory_tells_the_client_nothing_of_the_server(url, monkeypatch, caplog):
    def broken(*args: Any, **kwargs: Any) -> None:
        raise FileNotFoundError("/srv/private/data.json (env_kwargs={'api_key': 'k'})")

    monkeypatch.setattr(GymEnvironment, "__init__", broken)
    caplog.set_level(logging.ERROR)
    with _ws(url) as ws:
        reply = _ask(ws, {"type": "reset", "data": {"seed": 0}})  # the env is built at the first message
    assert reply["data"]["code"] == "FACTORY_ERROR" and "/srv" not in json.dumps(reply)
    assert "api_key" not in json.dumps(reply) and any("/srv/private" in r.getMessage() or r.exc_info
                                                      for r in caplog.records)


# ------------------------------------------------------------------- 7. stateless routes
def test_metadata_and_schema_build_no_env(url, monkeypatch):
    built = []
    monkeypatch.setattr(gym, "make", lambda *args, **kwargs: built.append(args))
    for _ in range(5):
        assert httpx.get(f"{url}/metadata", timeout=5).json()["name"] == "CSRPhone-v1"
        assert httpx.get(f"{url}/schema", timeout=5).status_code == 200
    assert built == []


# ------------------------------------------------------------------- 8. exposure
def test_a_token_guards_every_route_and_the_socket(serve_app):
    url = serve_app(create_app("CSRPhone-v1", token=TOKEN))
    for path in ("/health", "/metadata", "/schema", "/sessions"):
        assert httpx.get(f"{url}{path}", timeout=5).status_code == 401
        assert httpx.get(f"{url}{path}", headers={"Authorization": "Bearer wrong-token-0123456789"},
                         timeout=5).status_code == 401
        assert httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5).status_code == 200
    with pytest.raises(InvalidStatus):
        _ws(url)
    with _ws(url, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        assert _ask(ws, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"
    with pytest.raises(RemoteEnvError, match="could not connect"):
        OpenEnvGym(url, timeout_s=5)
    env = OpenEnvGym(url, timeout_s=5, token=TOKEN)
    try:
        assert env.reset(seed=0)[0] == gym.make("CSRPhone-v1").reset(seed=0)[0]
    finally:
        env.close()


def test_serving_beyond_loopback_needs_a_token_or_insecure(monkeypatch):
    monkeypatch.delenv("WORLDGYM_SERVE_TOKEN", raising=False)
    with pytest.raises(ValueError, match="refusing to serve on '0.0.0.0' without a token"):
        check_exposure("0.0.0.0", None, insecure=False)
    with pytest.raises(ValueError, match="without a token"):
        build_server("CSRPhone-v1", "192.168.1.5")
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_exposure(host, None, insecure=False)
    check_exposure("0.0.0.0", TOKEN, insecure=False)
    check_exposure("0.0.0.0", None, insecure=True)
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app("CSRPhone-v1", token="short")
    with pytest.raises(SystemExit, match="worldgym serve: error: refusing to serve on '0.0.0.0'"):
        worldgym_command(["serve", "CSRPhone-v1", "--host", "0.0.0.0"])
