"""Each agent page's quick start runs as written, and its Logged metrics table names every key it wrote."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("agent_quickstarts", REPO / "tools" / "agent_quickstarts.py")
quickstarts = sys.modules.setdefault("agent_quickstarts", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(quickstarts)

SECTIONS = ("Quick start", "How it works", "Logged metrics", "Customising", "Config reference")


@pytest.mark.parametrize("agent", sorted(quickstarts.PAGES))
def test_page_has_the_sections(agent: str) -> None:
    text = (REPO / "docs" / "agents" / quickstarts.PAGES[agent]).read_text()
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), headings


@pytest.mark.slow
@pytest.mark.parametrize("agent", sorted(quickstarts.PAGES))
def test_quickstart_runs_and_its_metrics_are_documented(agent: str, tmp_path: Path) -> None:
    page = quickstarts.PAGES[agent]
    quickstarts.run(page, tmp_path)
    keys = quickstarts.metric_keys(tmp_path)
    assert "step" in keys
    text = (REPO / "docs" / "agents" / page).read_text()
    table = text.split("\n## Logged metrics\n", 1)[1].split("\n## ", 1)[0]
    assert [key for key in keys if f"`{key}`" not in table] == []
