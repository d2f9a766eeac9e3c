"""``worldgym runs list RUN`` and ``worldgym runs show RUN [--step N] [--failed] [--episode K] [--train]``: a run's
steps, metrics and checkpoints, and the episodes its transcripts hold (:mod:`worldgym.transcripts`), printed with
rich."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from worldgym.checkpointing import is_complete
from worldgym.errors import RunFolderError
from worldgym.jsonl import read_jsonl
from worldgym.run_folder import METRICS_FILE, check_run_folder, read_results
from worldgym.transcripts import read_transcript, transcript_steps

__all__ = ["add_runs_parser", "list_run", "run_runs", "show_run"]

# the columns `runs list` prefers, in order, where the run logged them (then the first losses)
_PREFERRED = ("eval/success_rate", "eval/reward_mean", "rollout/reward_mean", "rollout/success_rate",
              "episode/return_mean", "eval/wm_token_accuracy")
_MAX_COLUMNS = 6


def list_run(run_dir: str | Path, console: Console | None = None) -> None:
    """Print a run's logged steps (step, the main metrics, whether it has a checkpoint or a transcript), its
    checkpoints and its best one."""
    run = check_run_folder(run_dir)
    console = console or Console()
    rows = read_jsonl(run / METRICS_FILE)
    columns = _columns(rows)
    transcripts = set(transcript_steps(run))
    checkpoints = {p.name: p for p in sorted(run.glob("checkpoint-*")) if p.is_dir() and is_complete(p)}
    table = Table(title=f"{run}: {len(rows)} logged rows")
    for name in ("step", *columns, "checkpoint", "episodes"):
        table.add_column(name, justify="right" if name not in ("checkpoint", "episodes") else "left")
    for row in rows:
        step = row.get("step")
        table.add_row(str(step), *(_cell(row.get(name)) for name in columns),
                      "yes" if f"checkpoint-{step}" in checkpoints else "",
                      f"step-{step}.jsonl" if step in transcripts else "")
    console.print(table)
    console.print(f"checkpoints: {', '.join(checkpoints) or 'none'}")
    best = read_results(run).get("best_checkpoint")
    if best:
        console.print(f"best: {best['path']} at step {best['step']} ({best['metric']} = {_cell(best['value'])})")


def show_run(run_dir: str | Path, step: int | None = None, failed: bool = False, episode: int | None = None,
             training: bool = False, console: Console | None = None) -> None:
    """Print the episodes of a transcript (default: the newest validation's): each message with its role (and
    ``view``, where the record labels answers by what the model saw), the parsed tool calls, rewards and response
    types; ``failed`` keeps the unsuccessful ones, ``episode`` one.

    Raises:
        RunFolderError: the run has no such transcript or episode (the message lists what it has).
    """
    run = check_run_folder(run_dir)
    console = console or Console()
    steps = transcript_steps(run, training)
    kind = "sampled training" if training else "validation"
    if not steps:
        raise RunFolderError(f"{run} has no {kind} transcripts (episodes/): the run logged none "
                             "(log_episodes='none', or trained by an agent without transcripts)")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise RunFolderError(f"{run} has no {kind} transcript of step {step}: it has steps {steps}")
    records = read_transcript(run, step, training)
    if episode is not None:
        records = [r for r in records if r.get("episode") == episode]
        if not records:
            raise RunFolderError(f"step {step} of {run} has no episode {episode}")
    if failed:
        records = [r for r in records if not r.get("success")]
    console.print(f"[bold]{run}[/bold], {kind} episodes of step {step}: {len(records)} shown")
    for record in records:
        _print_episode(record, console)


def _print_episode(record: dict[str, Any], console: Console) -> None:
    outcome = "[green]success[/green]" if record.get("success") else "[red]failure[/red]"
    title = (f"episode {record.get('episode')} (env seed {record.get('env_seed')}): {outcome}, reward "
             f"{_cell(record.get('reward'))}, {record.get('num_turns')} turns")
    if "correct" in record:  # a question with a right answer (the cartridge distiller's)
        title += f", correct answer {record['correct']}"
    lines = []
    for message in record.get("messages", []):
        role = str(message.get("role")) + (f" ({message['view']})" if "view" in message else "")
        lines.append(f"[bold cyan]{_escape(role)}[/bold cyan]: {_escape(message.get('content', ''))}")
        if "tool_call" in message:
            lines.append(f"  [magenta]tool call[/magenta]: {_escape(json.dumps(message['tool_call']))}")
        details = {k: v for k, v in message.items() if k not in ("role", "view", "content", "tool_call")}
        if details:
            lines.append(f"  [dim]{_escape(json.dumps(details, default=str))}[/dim]")
    console.print(Panel("\n".join(lines), title=title, title_align="left"))


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    keys = {key for row in rows for key, value in row.items() if isinstance(value, (int, float))}
    chosen = [key for key in _PREFERRED if key in keys]
    chosen += sorted(key for key in keys if key.startswith("loss/"))[: max(0, _MAX_COLUMNS - len(chosen))]
    return chosen[:_MAX_COLUMNS]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def add_runs_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``runs`` command (``list``, ``show``) to an ``add_subparsers()`` object."""
    parser = commands.add_parser("runs", help="look at a run folder: its steps, metrics and episodes",
                                 description=__doc__.split("\n\n", 1)[0])
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the run's steps, main metrics and checkpoints")
    listing.add_argument("run", type=Path, help="the run folder (the trainer's output_dir)")
    show = actions.add_parser("show", help="the episodes of one transcript")
    show.add_argument("run", type=Path, help="the run folder (the trainer's output_dir)")
    show.add_argument("--step", type=int, default=None, help="the validation step (default: the newest)")
    show.add_argument("--failed", action="store_true", help="only the episodes that did not succeed")
    show.add_argument("--episode", type=int, default=None, help="only episode K of the step")
    show.add_argument("--train", action="store_true", help="the sampled training episodes (log_episodes='all')")
    return parser


def run_runs(args: argparse.Namespace) -> None:
    """Run ``runs list`` or ``runs show``."""
    if args.action == "list":
        list_run(args.run)
    else:
        show_run(args.run, args.step, args.failed, args.episode, args.train)
