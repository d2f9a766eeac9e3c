"""What a newcomer waits for: the README's make targets timed on a fresh clone of the repository.

Clones the repository's committed ``HEAD`` into a temporary folder and runs ``make <target>`` there for each
``--targets`` in order (default ``setup test docs``: creating ``.venv`` and installing torch and the extras,
then lint + the test suite, then the docs site), recording each target's wall time and exit code, and for
``test`` the test runner's summary line (``N passed, M skipped``). ``make test`` and ``make docs`` find the
``.venv`` that ``make setup`` made, so their times leave the set-up out. The set-up's time depends on where
the packages come from (a local wheel cache or the network): the results say which commit and machine.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/fresh_clone.py                   # setup, test, docs (~30-40 min)
    OMP_WAIT_POLICY=PASSIVE python benchmarks/fresh_clone.py --targets setup demo
    python benchmarks/fresh_clone.py --quick      # `make -n` of each target: checks the script in seconds

Writes ``fresh_clone.json`` to ``benchmarks/results/`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import REPO, results_dir, results_parser, write_json

# pytest's closing line: "1,585 passed, 14 skipped, 3 warnings in 652.3s (0:10:52)"
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", re.MULTILINE)


def commit(repo: Path) -> str:
    """The commit ``HEAD`` of ``repo`` names (what the clone gets)."""
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run_target(clone: Path, target: str, dry_run: bool, log: Path) -> dict[str, Any]:
    """``make <target>`` in ``clone`` (``make -n`` with ``dry_run``): seconds, exit code, test summary; the
    output goes to ``log``."""
    command = ["make", *(["-n"] if dry_run else []), target]
    env = {**os.environ, "CI": "true", "OMP_WAIT_POLICY": "PASSIVE"}
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=clone, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    seconds = time.perf_counter() - start
    row: dict[str, Any] = {"command": " ".join(command), "seconds": round(seconds, 1),
                           "minutes": round(seconds / 60, 1), "returncode": done.returncode}
    if (summary := _SUMMARY.findall(log.read_text(errors="replace"))) and target == "test":
        row["summary"] = summary[-1]
    print(f"make {target}: {row['minutes']} min, exit {done.returncode}"
          + (f" ({row['summary']})" if "summary" in row else ""), flush=True)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--targets", nargs="+", default=["setup", "test", "docs"])
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository to clone (its committed HEAD)")
    args = parser.parse_args(argv)
    out = results_dir(args)
    results: dict[str, Any] = {"commit": commit(args.repo), "quick": args.quick, "targets": {},
                               "load_average_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="worldgym-fresh-clone-") as folder:
        clone = Path(folder) / "worldgym"
        subprocess.run(["git", "clone", "--quiet", str(args.repo), str(clone)], check=True)
        for target in args.targets:
            row = run_target(clone, target, args.quick, Path(folder) / f"{target}.log")
            results["targets"][target] = row
            if row["returncode"] != 0:
                print(f"make {target} failed; its log:\n" + (Path(folder) / f"{target}.log").read_text()[-4000:])
                break
    results["all_passed"] = all(row["returncode"] == 0 for row in results["targets"].values())
    results["load_average_after"] = round(os.getloadavg()[0], 2)
    write_json(out / "fresh_clone.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
