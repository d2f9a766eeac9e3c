"""The ``worldgym`` command (also ``python -m worldgym``): ``worldgym serve ENV_ID ...``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from worldgym.serve.cli import add_serve_parser, run_serve


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the command."""
    parser = argparse.ArgumentParser(prog="worldgym", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(commands)
    args = parser.parse_args(argv)
    run_serve(args)


if __name__ == "__main__":
    main()
