"""report_to: metrics, config and episode tables reach TensorBoard's event files and wandb's offline run files,
read back with TensorBoard's EventAccumulator and wandb's own protobuf records (not mocks)."""

import json
import re
import struct
import time
from pathlib import Path

import pytest

from worldgym.errors import ConfigError
from worldgym.tracking import TENSORBOARD_DIR, Tracker, check_report_to, report_targets

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

ROWS = [{"step": 0, "eval/success_rate": 0.25}, {"step": 1, "rollout/reward_mean": 0.5, "loss/policy": -0.125},
        {"step": 2, "rollout/reward_mean": 0.75, "eval/success_rate": 0.5, "note": "text is not a metric"}]
CONFIG = {"learning_rate": 0.01, "optim": {"betas": [0.9, 0.99]}, "env_id": "CSRPhone-v1"}
EPISODES = [{"episode": 0, "success": True, "reward": 1.0, "num_turns": 1, "response_types": ["transfer"],
             "messages": [{"role": "assistant", "content": "<tool_call>|done</tool_call>"}]}]


def _track(run_dir: Path, report_to) -> None:
    tracker = Tracker(report_to, run_dir, CONFIG)
    for row in ROWS:
        tracker.log(row, row["step"])
    tracker.log_episodes(EPISODES, 2)
    tracker.close()


def test_tensorboard_event_files_hold_every_metric_the_config_and_the_episodes(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _track(tmp_path, "tensorboard")
    events = EventAccumulator(str(tmp_path / TENSORBOARD_DIR), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert scalars == {"eval/success_rate": [(0, 0.25), (2, 0.5)], "rollout/reward_mean": [(1, 0.5), (2, 0.75)],
                       "loss/policy": [(1, -0.125)]}
    hparams = events.PluginTagToContent("hparams")
    assert b"learning_rate" in hparams["_hparams_/session_start_info"] and b"optim/betas" in (
        hparams["_hparams_/session_start_info"])
    text = events.Tensors("episodes/text_summary")[0]
    assert text.step == 2 and "transfer" in text.tensor_proto.string_val[0].decode()


def _wandb_records(run_file: Path):
    """The protobuf records of a wandb run file (wandb's LevelDB-style log: 7-byte header, 32 KiB blocks, each
    record a 7-byte header of CRC, length and type FULL/FIRST/MIDDLE/LAST), parsed as wandb's own ``Record``."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    position, pending = 7, b""
    while position + 7 <= len(data):
        block_left = 32768 - position % 32768
        if block_left < 7:
            position += block_left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if position + 7 + length > len(data):  # a record still being written: the file ends before it does
            return
        chunk = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _wandb_history_and_config(run_file: Path, timeout_s: float = 20.0) -> tuple[list[dict], dict]:
    """The history rows and the config of a wandb run file. wandb's service process writes the file; on a busy
    machine the last records may land a moment after ``finish()`` returns, so read again (bounded) until the
    three logged rows are there."""
    deadline = time.monotonic() + timeout_s
    while True:
        history, config = [], {}
        for record in _wandb_records(run_file):
            if record.WhichOneof("record_type") == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
            elif record.WhichOneof("record_type") in ("config", "run"):  # the config comes with the run record
                updates = record.config.update if record.HasField("config") else record.run.config.update
                config |= {item.key: json.loads(item.value_json) for item in updates}
        if len(history) >= len(ROWS) or time.monotonic() > deadline:
            return history, config
        time.sleep(0.2)


def test_wandb_offline_runs_hold_every_metric_the_config_and_the_episodes(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _track(tmp_path, ["wandb"])
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    history, config = _wandb_history_and_config(run_file)
    logged = {row["_step"]: {k: v for k, v in row.items() if not k.startswith("_")} for row in history}
    assert logged[0] == {"eval/success_rate": 0.25}
    assert logged[1] == {"rollout/reward_mean": 0.5, "loss/policy": -0.125}
    assert {k: v for k, v in logged[2].items() if not k.startswith("episodes/")} == {"rollout/reward_mean": 0.75,
                                                                                     "eval/success_rate": 0.5}
    assert logged[2]["episodes/_type"] == "table-file"
    assert config["learning_rate"] == 0.01 and config["optim"] == {"betas": [0.9, 0.99]}
    (table,) = run_file.parent.glob("files/media/table/episodes_*.table.json")
    assert json.loads(table.read_text())["data"][0][:3] == [0, True, 1.0]


def test_report_to_accepts_trls_values_and_refuses_others():
    assert report_targets("none") == () and report_targets("all") == ("tensorboard", "wandb")
    assert report_targets(["wandb", "tensorboard", "wandb"]) == ("wandb", "tensorboard")
    with pytest.raises(ConfigError, match=re.escape("report_to='mlflow' is invalid")):
        check_report_to("mlflow")


def test_a_missing_package_is_named_with_the_extra_to_install(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "wandb" else find_spec(name))
    with pytest.raises(ConfigError, match=re.escape("the 'wandb' package is not installed; install the tracking "
                                                    "extra: pip install 'worldgym[tracking]'")):
        check_report_to(["tensorboard", "wandb"])
