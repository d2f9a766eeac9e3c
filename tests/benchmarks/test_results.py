"""Committed benchmark results: no machine paths in them, and the README's and the docs' tables are the ones they
generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import main as suite_main
from benchmarks.common import absolute_paths
from benchmarks.table import (
    END,
    ROWS,
    START,
    render,
    render_cpu_precision,
    render_summary,
    replace_table,
    table_in,
)
from worldgym.machine import isa_label

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"


@pytest.mark.parametrize("text, found", [
    ("/work/main/runs/x", ["/work/main/runs/x"]), ("cd /tmp/abc/ && run", ["/tmp/abc/"]),
    ("~/data/x.json", ["~/data/x.json"]), ("C:\\Users\\me", ["C:\\Users\\me"]),
    ("runs/csr_dual_lora/tiny", []), ("eval/success_rate", []), ("3/3", []), ("load 3.47 / 3.66", []),
])
def test_absolute_paths_finds_paths_not_keys_or_ratios(text: str, found: list[str]) -> None:
    assert absolute_paths({"k": [text]}) == found


def test_committed_results_hold_no_absolute_paths() -> None:
    files = sorted(RESULTS.rglob("*.json"))
    assert len(files) > 10
    leaks = {str(f.relative_to(REPO)): paths for f in files if (paths := absolute_paths(json.loads(f.read_text())))}
    assert leaks == {}


def test_readme_table_is_generated_from_the_committed_results() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    assert START in section and END in section, "the table markers belong in the Benchmarks section"
    assert table_in(readme) == render_summary(RESULTS), "stale README table: run `python -m benchmarks --table-only`"


def test_docs_table_is_generated_from_the_committed_results() -> None:
    page = (REPO / "docs" / "results" / "benchmarks.md").read_text()
    assert table_in(page) == render(RESULTS), "stale docs benchmark table: run `python -m benchmarks --table-only`"


def test_precision_page_table_is_generated_from_the_committed_results() -> None:
    page = (REPO / "docs" / "precision.md").read_text()
    assert table_in(page) == render_cpu_precision(RESULTS), "stale: run `python -m benchmarks --table-only`"


def test_summary_links_each_row_to_an_existing_docs_page() -> None:
    missing = [row.page for row in ROWS if not (REPO / "docs" / row.page).is_file()]
    assert missing == []
    assert all(row.headline is not None for row in ROWS), "every row has a short cell for the README"


def test_table_says_which_results_are_missing_or_quick(tmp_path: Path) -> None:
    (tmp_path / "fuzz_envs.json").write_text((RESULTS / "fuzz_envs.json").read_text())
    quick = json.loads((RESULTS / "dreamer_ratio.json").read_text()) | {"quick": True}
    (tmp_path / "dreamer_ratio.json").write_text(json.dumps(quick))
    rows = {line.split(" | ")[0].strip("| "): line for line in render(tmp_path).splitlines()[2:]}
    assert "1,000,000 fuzzed steps: 0 unhandled exceptions" in rows["`benchmarks/fuzz_envs.py`"]
    assert "*quick run, figures mean nothing*: 0.098 / 0.499 / 1.000" in rows["`benchmarks/dreamer.py ratio`"]
    assert rows["`benchmarks/ztoken_ppo.py`"].endswith("| not measured yet (no ztoken_ppo.json) |")


def test_replace_table_needs_both_markers_in_order() -> None:
    assert replace_table(f"a\n{START}\nold\n{END}\nb", "new") == f"a\n{START}\nnew\n{END}\nb"
    with pytest.raises(ValueError, match="must hold one <!-- benchmark-table:start --> line"):
        replace_table(f"a\n{END}\n{START}\n", "new")


def test_table_only_rewrites_both_tables_and_check_sees_staleness(tmp_path: Path) -> None:
    readme, page, precision = tmp_path / "README.md", tmp_path / "benchmarks.md", tmp_path / "precision.md"
    for path in (readme, page, precision):
        path.write_text(f"# x\n\n## Benchmarks\n{START}\n| stale |\n{END}\n\n## Next\n")
    files = ["--readme", str(readme), "--benchmarks-page", str(page), "--precision-page", str(precision)]
    assert suite_main(["--check", *files]) == 1
    assert suite_main(["--table-only", *files]) == 0
    assert readme.read_text() == f"# x\n\n## Benchmarks\n{START}\n{render_summary(RESULTS)}\n{END}\n\n## Next\n"
    assert page.read_text() == f"# x\n\n## Benchmarks\n{START}\n{render(RESULTS)}\n{END}\n\n## Next\n"
    assert table_in(precision.read_text()) == render_cpu_precision(RESULTS)
    assert suite_main(["--check", *files]) == 0
    page.write_text(page.read_text().replace(render(RESULTS), "| stale |"))
    assert suite_main(["--check", *files]) == 1


def test_results_record_the_machine_and_tables_show_its_instruction_set(tmp_path: Path) -> None:
    from benchmarks.common import write_json
    from benchmarks.table import Row, _machine_cell

    write_json(tmp_path / "new.json", {"figure": 1.0, "machine": "x86_64"})
    written = json.loads((tmp_path / "new.json").read_text())
    machine = written["machine"]
    assert machine["platform"] == "x86_64"  # a script's own machine string is kept beside the fields
    for field in ("cpu_model", "cpu_count", "cpu_isa", "amx_bf16", "avx512_bf16", "torch", "transformers",
                  "load_average"):
        assert field in machine
    (tmp_path / "old.json").write_text(json.dumps({"figure": 2.0, "machine": "x86_64"}))
    def row(*files: str) -> Row:
        return Row("s", "m", files, lambda *data: "")
    assert _machine_cell(row("new.json"), tmp_path) == isa_label(machine)
    assert _machine_cell(row("old.json"), tmp_path) == "not recorded"
    assert _machine_cell(row("new.json", "old.json"), tmp_path) == f"{isa_label(machine)} / not recorded"


def test_csr_phone_success_is_the_current_env_as_the_documented_command_makes_it() -> None:
    """``csr_phone_success.json`` (the CSRPhone page's expert-vs-random table) is what ``python -m worldgym.demo``
    writes today: the env version it runs and the fields of each cell."""
    from worldgym.demo import run_demo

    committed = json.loads((RESULTS / "csr_phone_success.json").read_text())
    fresh = run_demo(episodes=1, seed=committed["seed"], split=committed["split"], difficulties=[1])
    assert committed["env"] == fresh["env"]
    assert set(committed["results"][0]) == set(fresh["results"][0])


def test_the_dual_lora_headline_names_no_winner_while_dapo_ran_alone() -> None:
    from benchmarks.table import _csr_dual_lora

    def row(success: float) -> dict[str, object]:
        return {"seeds": [0], "steps": [8], "steps_done": [8], "final_success": [success],
                "final_success_mean": success}

    alone = _csr_dual_lora({"runs": {"smollm2": {"dapo": row(0.25)}}}, None)
    assert "no other mode finished yet" in alone and "beats" not in alone
    compared = _csr_dual_lora({"runs": {"smollm2": {"dapo": row(0.25), "echo": row(0.5)}}}, None)
    assert "beat DAPO on the mean: echo" in compared
    dapo, echo = row(0.25) | {"final_success_ci95": [0.1, 0.4]}, row(0.3) | {"final_success_ci95": [0.2, 0.45]}
    close = _csr_dual_lora({"runs": {"smollm2": {"dapo": dapo, "echo": echo}}}, None)
    assert "above DAPO on the mean, their 95% intervals overlapping: echo" in close and "beat" not in close
