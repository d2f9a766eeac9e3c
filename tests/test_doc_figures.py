"""Every figure a page marks with its source agrees with the committed results JSON.

A figure's source is an HTML comment right after it (invisible on GitHub and on the site)::

    make demo took 11.8 min <!-- figures: csr_dual_lora_demo.json seconds/60=11.8 -->

``FILE`` is a path under ``benchmarks/results``; each ``KEY=VALUE`` names a key path in it (dots between keys,
integers index lists, ``-1`` the last item) with an optional ``*N`` or ``/N`` applied to the JSON value, and the
value as the page writes it (thousands commas allowed). The check: the JSON value, rounded to the decimals the
page shows, equals the page's value, and the page's value is written in the text the comment closes (since the
previous such comment or heading; a comment on its own line after a table covers the table; comments in a row,
one per results file, all close the text before the first).

``N`` may also be another key path of the same file in parentheses, for a ratio of two measured values (a
speed-up) that the JSON does not record itself::

    1,840 -> 950 s (1.94x) <!-- figures: retire.json runs.0.wall_s=1,840 runs.0.wall_s/(runs.1.wall_s)=1.94 -->

A figure derived any other way (a mean over seeds, a difference) is rewritten to state values the JSON holds.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
MARKER = re.compile(r"<!-- figures: (\S+) (.*?) -->")
ITEM = re.compile(r"^(.+?)(?:([*/])(\d+(?:\.\d+)?|\([^()]+\)))?=(-?[\d,]+(?:\.\d+)?)$")


def lookup(data, path: str):
    """The value at a dotted key path (``success.-1.1``); a key may itself hold dots (``shared-capped-0.1``)."""
    parts = path.split(".")
    while parts:
        if isinstance(data, list):
            data = data[int(parts.pop(0))]
            continue
        size = next((n for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in data), 1)
        data, parts = data[".".join(parts[:size])], parts[size:]
    return data


def text_before(text: str, position: int) -> str:
    """The text a comment at ``position`` closes: back to the previous figures comment or heading (comments in a
    row, one results file each, close the same text)."""
    while True:
        start = max(text.rfind("<!-- figures:", 0, position), text.rfind("\n#", 0, position), 0)
        shown = re.sub(r"<!--.*?-->", "", text[start:position], flags=re.DOTALL)
        if shown.strip() or not text.startswith("<!-- figures:", start):
            return shown
        position = start


def check_page(text: str, results: Path = RESULTS) -> list[str]:
    """What is wrong with a page's marked figures: one line per figure that disagrees or cannot be traced."""
    problems = []
    for marker in MARKER.finditer(text):
        name, items = marker.group(1), marker.group(2).split()
        path = results / name
        if not path.is_file():
            problems.append(f"{name}: no such results file")
            continue
        data = json.loads(path.read_text())
        shown = text_before(text, marker.start())
        for item in items:
            match = ITEM.match(item)
            if match is None:
                problems.append(f"{name}: cannot read {item!r} (KEY[*N|/N]=VALUE)")
                continue
            key, op, factor, written = match.groups()
            keys = [key, factor[1:-1]] if factor and factor.startswith("(") else [key]
            try:
                value, *other = [float(lookup(data, k)) for k in keys]
            except (KeyError, IndexError, ValueError, TypeError):
                problems.append(f"{name}: no number at {' or '.join(keys)}")
                continue
            if other:
                key, factor = f"{key}{op}{factor}", other[0]
            value = value * float(factor) if op == "*" else value / float(factor) if op == "/" else value
            decimals = len(written.split(".")[1]) if "." in written else 0
            if round(value, decimals) != float(written.replace(",", "")):
                problems.append(f"{name}: {key} is {value:.{decimals + 2}f}, the page says {written}")
            if written not in shown:
                problems.append(f"{name}: {key}: the page's text no longer shows {written} before the comment")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_marked_figures_agree_with_their_results(page: Path) -> None:
    assert check_page(page.read_text()) == []


def figures_section(text: str) -> str:
    """A page's ``## Figures`` section (empty where it has none)."""
    start = text.find("\n## Figures\n")
    end = text.find("\n## ", start + 1)
    return "" if start < 0 else text[start : end if end >= 0 else len(text)]


def test_the_site_marks_figures() -> None:
    """Every results page, and every agent page whose Figures section cites a results file, marks its figures.

    A results page made only of generated tables (``benchmark-table``) is checked by the table tests instead.
    """
    results = sorted((REPO / "docs" / "results").glob("*.md"))
    agents = [page for page in sorted((REPO / "docs" / "agents").glob("*.md"))
              if re.search(r"\]\(\.\./figures/[^)]+\.json\)", figures_section(page.read_text()))]
    unmarked = [str(page.relative_to(REPO)) for page in [*results, *agents]
                if not MARKER.search(page.read_text()) and "<!-- benchmark-table:start -->" not in page.read_text()]
    assert len(results) >= 5 and len(agents) >= 4 and unmarked == [], (agents, unmarked)


SAMPLE = "## Demo\n\nIt took 11.8 min, 32.8% success.\n<!-- figures: run.json seconds/60=11.8 success.-1.1*100=32.8 -->\n"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    (tmp_path / "run.json").write_text(json.dumps({"seconds": 710.07, "success": [[0, 0.2656], [16, 0.328125]]}))
    return tmp_path


def test_a_figure_that_matches_its_json_passes(results: Path) -> None:
    assert check_page(SAMPLE, results) == []


def test_a_figure_changed_by_hand_fails(results: Path) -> None:
    page = SAMPLE.replace("seconds/60=11.8", "seconds/60=9.0").replace("took 11.8", "took 9.0")
    assert check_page(page, results) == ["run.json: seconds is 11.835, the page says 9.0"]


def test_a_figure_edited_in_the_text_only_fails(results: Path) -> None:
    page = SAMPLE.replace("took 11.8", "took 9")
    assert check_page(page, results) == ["run.json: seconds: the page's text no longer shows 11.8 before the comment"]


def test_comments_in_a_row_close_the_same_text(results: Path) -> None:
    (results / "other.json").write_text(json.dumps({"share": 0.87}))
    page = SAMPLE + "<!-- figures: other.json share*100=87 -->\n"
    assert check_page(page, results) == ["other.json: share: the page's text no longer shows 87 before the comment"]
    page = SAMPLE.replace("success.\n", "success, 87% shared.\n") + "<!-- figures: other.json share*100=87 -->\n"
    assert check_page(page, results) == []
    assert check_page(page + "Later text.\n<!-- figures: other.json share*100=87 -->\n", results) == [
        "other.json: share: the page's text no longer shows 87 before the comment"]


def test_a_ratio_of_two_keys_passes_and_fails_when_changed(results: Path) -> None:
    page = "From 26.6% to 32.8% (1.24x).\n<!-- figures: run.json success.-1.1/(success.0.1)=1.24 -->\n"
    assert check_page(page, results) == []
    changed = page.replace("1.24", "1.50")
    assert check_page(changed, results) == ["run.json: success.-1.1/(success.0.1) is 1.2354, the page says 1.50"]
    missing = page.replace("(success.0.1)", "(nothing)")
    assert check_page(missing, results) == ["run.json: no number at success.-1.1 or nothing"]


def test_a_missing_file_or_key_fails(results: Path) -> None:
    assert check_page("x <!-- figures: gone.json a=1 -->", results) == ["gone.json: no such results file"]
    assert check_page("1 <!-- figures: run.json nothing=1 -->", results) == ["run.json: no number at nothing"]


_tables_spec = importlib.util.spec_from_file_location("results_tables", REPO / "tools" / "results_tables.py")
results_tables = sys.modules.setdefault("results_tables", importlib.util.module_from_spec(_tables_spec))
_tables_spec.loader.exec_module(results_tables)


@pytest.mark.parametrize("page", sorted(results_tables.TABLES))
def test_generated_results_tables_are_up_to_date(page: str) -> None:
    text = (REPO / page).read_text()
    assert results_tables.render_page(page, text) == text, "stale table: run `python tools/results_tables.py`"
