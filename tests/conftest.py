"""Shared by every test folder: the ``gpu`` marker's skip, one torch thread, loading an example script as a module,
damaging a saved checkpoint the way a crash or a bad disk would, and serving an app on a free localhost port."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from worldgym.checkpointing import MANIFEST

DAMAGES = ("truncated", "flipped_byte", "missing", "wrong_version")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (tiny models run fastest so on a shared CPU, and float reductions match
    single-threaded worker processes); the setting is restored afterwards."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_example() -> Callable[[str], ModuleType]:
    """``load_example("train_grpo")``: ``examples/train_grpo.py`` as a module, to call its ``main(argv)``."""
    return _load_example


@pytest.fixture(scope="module")
def serve_app() -> Iterator[Callable[[object], str]]:
    """``serve_app(app)``: run an ASGI app (e.g. ``worldgym.serve.create_app(...)``) with uvicorn in a thread on
    a free localhost port and return its ``http://`` URL; every server stops when the test module ends."""
    import uvicorn

    running: list[tuple[uvicorn.Server, threading.Thread, socket.socket]] = []

    def serve(app: object) -> str:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the test server did not start within 20 s")
            time.sleep(0.01)
        running.append((server, thread, sock))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield serve
    for server, thread, sock in running:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@functools.cache
def _missing_gpu(warp: bool) -> str | None:
    """Why a GPU test cannot run here (None when it can): torch sees no CUDA device, or (``warp``) Warp does
    not."""
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA device (torch.cuda.is_available() is False)"
    if warp:
        if importlib.util.find_spec("warp") is None:
            return "needs NVIDIA Warp (warp-lang) with CUDA"
        import warp as wp

        wp.init()
        if not wp.is_cuda_available():
            return "needs a CUDA device that Warp can use (warp.is_cuda_available() is False)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every test marked ``gpu`` (``@pytest.mark.gpu``, or ``gpu(warp=True)`` for Warp kernels on CUDA)
    when this machine cannot run it; the one place GPU tests are skipped."""
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        reason = _missing_gpu(bool(marker.kwargs.get("warp", False)))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def damage_checkpoint(root: Path, name: str, damage: str) -> str:
    """Damage file ``name`` of the checkpoint in ``root``; return a regex its ``CheckpointError`` must match.

    ``truncated`` cuts the file in half, ``flipped_byte`` flips one bit of its last byte (inside the tensor
    data of a safetensors file, which then still parses), ``missing`` deletes it, ``wrong_version`` rewrites
    the manifest's format version to 1 (``name`` is ignored).
    """
    file = root / name
    if damage == "truncated":
        data = file.read_bytes()
        file.write_bytes(data[: len(data) // 2])
        return re.escape(f"{file} is corrupt")
    if damage == "flipped_byte":
        data = bytearray(file.read_bytes())
        data[-1] ^= 0x01
        file.write_bytes(bytes(data))
        return re.escape(f"{file} is corrupt")
    if damage == "missing":
        file.unlink()
        return re.escape(f"{root} is incomplete: missing ['{name}']")
    if damage == "wrong_version":
        manifest = json.loads((root / MANIFEST).read_text())
        (root / MANIFEST).write_text(json.dumps({**manifest, "format_version": 1}))
        return re.escape(f"{root / MANIFEST}: checkpoint format 1, this worldgym reads format ") + r"[\d and]+ only"
    raise ValueError(f"unknown damage {damage!r}: use one of {DAMAGES}")


def damage_run_file(segment: Path, checkpoint: Path, damage: str) -> str:
    """Damage a run file (a replay segment) that ``checkpoint`` lists: ``missing`` deletes it, ``corrupt`` flips
    one bit of its last byte; return the message the ``RunFileError`` must contain."""
    if damage == "missing":
        segment.unlink()
        return f"checkpoint {checkpoint} needs {segment}, which is missing"
    if damage == "corrupt":
        data = bytearray(segment.read_bytes())
        data[-1] ^= 0x01
        segment.write_bytes(bytes(data))
        return f"run file {segment} is corrupt"
    raise ValueError(f"unknown damage {damage!r}: use 'missing' or 'corrupt'")


@pytest.fixture
def damage_segment() -> Callable[[Path, Path, str], str]:
    """:func:`damage_run_file`."""
    return damage_run_file


@pytest.fixture
def damage() -> Callable[[Path, str, str], str]:
    """:func:`damage_checkpoint`."""
    return damage_checkpoint


@pytest.fixture
def logged_to_tensorboard():
    """``check(run_dir)``: assert the run's TensorBoard event files hold exactly the numeric values of its
    ``metrics.jsonl`` (key, step), read back with TensorBoard's own EventAccumulator."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from worldgym.jsonl import read_jsonl

    def check(run_dir):
        events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
        events.Reload()
        expected = {(key, row["step"]) for row in read_jsonl(run_dir / "metrics.jsonl") for key, value in row.items()
                    if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}
        logged = {(tag, event.step) for tag in events.Tags()["scalars"] for event in events.Scalars(tag)}
        assert expected and logged == expected

    return check
