"""The env pages (docs/envs/*.md): one per registered id, in Gymnasium's form, with generated tables that match
the envs and an info table that names every key the env reports."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from worldgym.registration import ENV_SPECS, INTEROP_ENV_SPECS

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("env_pages", REPO / "tools" / "env_pages.py")
env_pages = sys.modules.setdefault("env_pages", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(env_pages)

SECTIONS = ("Description", "Action Space", "Observation Space", "Rewards", "Starting State", "Episode End",
            "Arguments", "`info` keys", "Version History")
EXTRA_MODULES = {"gameboy": "warp", "interop": "reasoning_gym"}
PAGES = {page.env_id: page for page in env_pages.PAGES}


def _needs(page) -> None:
    if page.extra:
        pytest.importorskip(EXTRA_MODULES[page.extra])


def test_every_registered_id_has_a_page_in_the_nav() -> None:
    assert set(PAGES) == set(ENV_SPECS) | set(INTEROP_ENV_SPECS)
    nav = (REPO / "mkdocs.yml").read_text()
    assert all(f"envs/{page.page}" in nav for page in PAGES.values())


@pytest.mark.parametrize("env_id", sorted(PAGES))
def test_page_has_gymnasiums_sections_in_order(env_id: str) -> None:
    text = (REPO / "docs" / "envs" / PAGES[env_id].page).read_text()
    assert text.startswith(f"# {env_id}\n")
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), headings


@pytest.mark.parametrize("env_id", sorted(PAGES))
def test_generated_tables_are_up_to_date(env_id: str) -> None:
    page = PAGES[env_id]
    _needs(page)
    text = (REPO / "docs" / "envs" / page.page).read_text()
    assert env_pages.render_page(page, text) == text, "stale env page: run `python tools/env_pages.py`"


@pytest.mark.parametrize("env_id", sorted(PAGES))
def test_arguments_table_lists_every_constructor_argument(env_id: str) -> None:
    page = PAGES[env_id]
    _needs(page)
    table = env_pages.render_arguments(page)
    names = [row[0] for row in env_pages.constructor_arguments(env_pages.entry_class(env_id))]
    assert names and all(f"| `{name}` |" in table for name in names)


@pytest.mark.parametrize("env_id", sorted(env_id for env_id, page in PAGES.items() if page.make_kwargs is not None))
def test_info_table_names_every_key_of_reset_and_step(env_id: str) -> None:
    page = PAGES[env_id]
    _needs(page)
    text = (REPO / "docs" / "envs" / page.page).read_text()
    section = text.split("## `info` keys\n", 1)[1].split("\n## ", 1)[0]
    env = gym.make(env_id, **page.make_kwargs)
    _, reset_info = env.reset(seed=0)
    env.action_space.seed(0)
    *_, step_info = env.step(env.action_space.sample())
    env.close()
    missing = sorted(key for key in {*reset_info, *step_info} if f"`{key}`" not in section)
    assert missing == [], f"{page.page}: the info table does not name {missing}"


def test_an_undescribed_argument_is_an_error() -> None:
    class Env(gym.Env):
        """An env.

        ## Arguments
        size: how big.
        """

        def __init__(self, size: int = 1, colour: str = "red"):
            pass

    with pytest.raises(ValueError, match=re.escape("describes no ['colour']")):
        env_pages.constructor_arguments(Env)


def test_docstring_arguments_reads_continuation_lines_and_stops_at_the_next_section() -> None:
    doc = """X.

    ## Arguments
    a: first
        and more.
    b (int): second.

    ## Version History
    c: not an argument.
    """
    assert env_pages.docstring_arguments(doc) == {"a": "first and more.", "b": "second."}
