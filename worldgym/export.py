"""``worldgym export RUN [--checkpoint best|last|N] --to DIR``: a run's trained policy in a format other tools load.

What is written depends on the agent that trained the run (read from the checkpoint's manifest):

* GRPO and dual-LoRA (:mod:`worldgym.agents.llm.export`): a standard PEFT adapter folder plus tokenizer and base
  model, or a full transformers model folder for a model trained in full;
* Dreamer v3 (:mod:`worldgym.agents.dreamer_v3.export`) and Z-token PPO (:mod:`worldgym.agents.ztoken_ppo.export`):
  the policy's weights as safetensors with the small loader their pages show.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from worldgym.checkpointing import MANIFEST, read_json
from worldgym.errors import ExportError
from worldgym.run_folder import find_checkpoint

__all__ = ["add_export_parser", "export", "run_export"]


def export(run_dir: str | Path, to: str | Path, checkpoint: str = "last") -> Path:
    """Export the policy of checkpoint ``checkpoint`` (``"best"``, ``"last"`` or a step) of ``run_dir`` to ``to``.

    Raises:
        RunFolderError / CheckpointNotFoundError: no such run or checkpoint.
        ExportError: the checkpoint's agent has no export (the cartridge agent's product is its
            ``cartridge/`` folder), or the run kept too little to rebuild its policy.
    """
    folder = find_checkpoint(run_dir, checkpoint)
    kind = read_json(folder / MANIFEST).get("kind")
    if kind == "weights":
        from worldgym.agents.llm.export import export_run

        return export_run(run_dir, folder, to)
    if kind == "dreamer_v3":
        from worldgym.agents.dreamer_v3.export import export_policy

        return export_policy(folder, to)
    if kind == "ztoken_ppo":
        from worldgym.agents.ztoken_ppo.export import export_policy as export_ztoken

        return export_ztoken(folder, to)
    raise ExportError(f"{folder} is a {kind!r} checkpoint, which has no export (GRPO, dual-LoRA, Dreamer v3 and "
                      "Z-token PPO runs have one)")


def add_export_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``export`` command to an ``add_subparsers()`` object."""
    parser = commands.add_parser(
        "export", help="write a run's trained policy where other tools load it",
        description=__doc__.split("\n", 1)[0].split(": ", 1)[1])
    parser.add_argument("run", type=Path, help="the run folder (the trainer's output_dir)")
    parser.add_argument("--checkpoint", default="last",
                        help="'best' (checkpoint-best), 'last' (the newest) or a step number (checkpoint-N)")
    parser.add_argument("--to", type=Path, required=True, help="the folder to write (replaced if it exists)")
    return parser


def run_export(args: argparse.Namespace) -> None:
    """Export ``args.run``'s policy and say where it went."""
    out = export(args.run, args.to, args.checkpoint)
    print(f"exported {args.run} ({args.checkpoint}) to {out}")
