"""What every benchmark script shares: where results go, the ``--quick`` / ``--results-dir`` flags, and JSON
that never holds a machine's absolute paths and always says which machine made it (``"machine"``:
:func:`worldgym.machine.machine_info`).

A script run as a file (``python benchmarks/<name>.py``) imports this module as ``benchmarks.common`` after
putting the repository root on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
QUICK_RESULTS = REPO / "runs" / "benchmarks" / "quick"  # git-ignored: quick figures never replace real ones
# an absolute path on its own or inside text: /dir/..., ~/..., C:\\...
_ABSOLUTE = re.compile(r"(?:^|[\s'\"=(,:])(/(?:[\w.+@-]+/)+[\w.+@-]*|~/[\w.+@/-]+|[A-Za-z]:\\[^\s'\"]+)")


def results_parser() -> argparse.ArgumentParser:
    """A parent parser with ``--quick`` and ``--results-dir`` (``argparse.ArgumentParser(parents=[...])``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and 1-2 iterations: checks the script end to end in seconds (its figures "
                             "mean nothing)")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help=f"where the results JSON (and PNG) go (default {portable(RESULTS)}, or "
                             f"{portable(QUICK_RESULTS)} with --quick)")
    return parser


def results_dir(args: argparse.Namespace) -> Path:
    """The folder ``--results-dir`` names (created), else the default for the mode."""
    path = args.results_dir or (QUICK_RESULTS if args.quick else RESULTS)
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_missing(name: str) -> bool:
    """Whether the named pretrained model is not installed here (not for ``"tiny"``, which is built from
    config); says so, for a script to skip its run."""
    if name == "tiny":
        return False
    from worldgym.agents.llm.pretrained import named_model_available

    if named_model_available(name):
        return False
    print(f"skipped: {name} is not installed here (see worldgym.agents.llm.pretrained)")
    return True


def model_ready(args: argparse.Namespace) -> bool:
    """Whether a script can run ``args.model`` (it is installed, else :func:`model_missing` says so); when it
    can, torch computes on ``args.threads`` threads."""
    if model_missing(args.model):
        return False
    import torch

    torch.set_num_threads(args.threads)
    return True


def portable(path: str | Path) -> str:
    """``path`` relative to the repository, or just its name when it lies outside: never a machine's path."""
    resolved = Path(path).resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else resolved.name


def write_json(path: Path, payload: Any, indent: int = 1) -> Path:
    """Write ``payload`` as JSON (``Path`` values as :func:`portable` strings) and print where it went.

    A results object gets the machine it was made on under ``"machine"`` (:func:`machine_record`), set in the
    caller's dict too, so what a script returns is what it wrote.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(payload, dict):
        payload["machine"] = machine_record(payload.get("machine"))
    path.write_text(json.dumps(payload, indent=indent, default=_portable_default) + "\n")
    print(f"wrote {portable(path)}")
    return path


def machine_record(own: Any = None) -> dict[str, Any]:
    """This machine's :func:`~worldgym.machine.machine_info` (CPU model, cores, ISA level, AMX/AVX512-BF16,
    versions, load average), with a script's ``own`` machine details kept beside it (a dict merged under it, a
    string as ``"platform"``)."""
    from worldgym.machine import machine_info

    extra = own if isinstance(own, dict) else {} if own is None else {"platform": own}
    return {**extra, **machine_info()}


def _portable_default(value: Any) -> str:
    if isinstance(value, Path):
        return portable(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def absolute_paths(value: Any) -> list[str]:
    """Every absolute path in the strings (keys included) of a JSON value: results must hold none."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in absolute_paths(k) + absolute_paths(v)]
    if isinstance(value, list):
        return [p for item in value for p in absolute_paths(item)]
    return [m.group(1) for m in _ABSOLUTE.finditer(value)] if isinstance(value, str) else []


def train_in_chunks(trainer: Any, every: int, on_chunk: Callable[[], None]) -> None:
    """Train ``trainer`` (a GRPO-family trainer) to ``config.num_steps``, calling ``on_chunk`` after the step-0
    validation and after every ``every`` steps: a script that writes its part file there keeps every validation
    a run made, even when the run is stopped before its last step (a resumed run continues the chunks)."""
    until = trainer.step
    while True:
        trainer.train(until=until)
        on_chunk()
        if trainer.step >= trainer.config.num_steps:
            return
        until = (trainer.step // max(every, 1) + 1) * max(every, 1)


def add_batch_flags(parser: argparse.ArgumentParser) -> None:
    """``--prompts-per-step`` / ``--group-size`` / ``--temperature``: a GRPO run's batch and rollout sampling,
    when not the model's CSR preset's."""
    parser.add_argument("--prompts-per-step", type=int, help="tasks per step (default: the model's CSR preset)")
    parser.add_argument("--group-size", type=int, help="samples per task (default: the model's CSR preset)")
    parser.add_argument("--temperature", type=float,
                        help="sampling temperature of training rollouts (default: the preset's, 1.0)")


def batch_settings(args: argparse.Namespace) -> dict[str, int | float]:
    """The batch and rollout flags given on the command line, as config fields."""
    return {key: getattr(args, key) for key in ("prompts_per_step", "group_size", "temperature")
            if getattr(args, key) is not None}


def batch_command(args: argparse.Namespace) -> str:
    """The batch flags given, as they were written (for a results file's ``command``)."""
    return "".join(f" --{key.replace('_', '-')} {value}" for key, value in batch_settings(args).items())


def temperature_suffix(temperature: float | None) -> str:
    """``-T<temperature>`` for a run or report name when a rollout temperature other than the presets' 1.0 is
    set (``None`` and 1.0 keep the plain name), so a resumed run never mixes two temperatures."""
    return "" if temperature is None or temperature == 1.0 else f"-T{temperature:g}"


def set_torch_threads(default: int) -> None:
    """torch's thread count: ``WORLDGYM_THREADS`` (1 when other jobs share the cores), else ``default``."""
    import torch

    torch.set_num_threads(int(os.environ.get("WORLDGYM_THREADS", default)))
