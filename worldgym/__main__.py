"""The ``worldgym`` command (also ``python -m worldgym``): ``serve``, ``export`` and ``runs``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from worldgym.errors import WorldgymError
from worldgym.export import add_export_parser, run_export
from worldgym.runs import add_runs_parser, run_runs
from worldgym.serve.cli import add_serve_parser, run_serve


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the command; a library error ends it with its message and status 2."""
    parser = argparse.ArgumentParser(prog="worldgym", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    add_export_parser(commands)
    add_runs_parser(commands)
    args = parser.parse_args(argv)
    run = {"serve": run_serve, "export": run_export, "runs": run_runs}[args.command]
    try:
        run(args)
    except WorldgymError as error:
        parser.exit(2, f"worldgym {args.command}: {type(error).__name__}: {error}\n")


if __name__ == "__main__":
    main()
