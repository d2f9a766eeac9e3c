"""Runs each agent page's quick start as written and records how long it took.

The quick start is the first ``python`` block under an agent page's ``## Quick start`` heading;
``tests/agents/test_quickstarts.py`` runs the same code. This script runs each in a fresh folder and writes
``benchmarks/results/agent_quickstarts.json``: the seconds each took, the machine's core count and its load
before and after, and the keys each run wrote to its ``metrics.jsonl``.

    python tools/agent_quickstarts.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = {"grpo": "grpo.md", "dual_lora": "dual-lora.md", "cartridge": "cartridge.md",
         "ztoken_ppo": "ztoken-ppo.md", "dreamer_v3": "dreamer-v3.md"}
OUTPUT = REPO / "benchmarks" / "results" / "agent_quickstarts.json"


def quickstart(page: str) -> str:
    """The code of the first ``python`` block under the page's ``## Quick start`` heading."""
    text = (REPO / "docs" / "agents" / page).read_text()
    section = text.split("\n## Quick start\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    if match is None:
        raise ValueError(f"{page}: no python block under ## Quick start")
    return match.group(1)


def metric_keys(folder: Path) -> list[str]:
    """Every key of every line of the ``metrics.jsonl`` files under ``folder``."""
    keys: set[str] = set()
    for path in folder.rglob("metrics.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                keys |= set(json.loads(line))
    return sorted(keys)


def run(page: str, folder: Path) -> float:
    """Run the page's quick start in ``folder`` with this checkout's worldgym; the seconds it took."""
    script = folder / "quickstart.py"
    script.write_text(quickstart(page))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    subprocess.run([sys.executable, str(script)], cwd=folder, env=env, check=True)
    return time.perf_counter() - start


def main() -> int:
    results: dict = {"command": "python tools/agent_quickstarts.py", "cores": os.cpu_count(), "agents": {}}
    for agent, page in PAGES.items():
        with tempfile.TemporaryDirectory() as tmp:
            load_before = os.getloadavg()[0]
            seconds = run(page, Path(tmp))
            results["agents"][agent] = {"page": f"docs/agents/{page}", "seconds": round(seconds, 1),
                                        "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0],
                                        "metric_keys": metric_keys(Path(tmp))}
            print(f"{agent}: {seconds:.0f} s", flush=True)
    OUTPUT.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
