"""Writes the generated parts of the env pages (``docs/envs/*.md``) from the envs themselves.

Each env page holds two generated blocks: the summary table (spaces, ``gym.make`` call, reward range, vector
env support, render modes), between ``<!-- env-summary:start -->`` and ``<!-- env-summary:end -->``, and the
Arguments table (every constructor argument with its type, default and the description from the env's
docstring), between ``<!-- env-arguments:start -->`` and ``<!-- env-arguments:end -->``. The spaces come from
an env built with its default arguments, the arguments from the constructor's signature, so neither can drift
from the code; ``tests/test_env_pages.py`` fails when a page is stale.

    python tools/env_pages.py           # rewrite the blocks of every env page
    python tools/env_pages.py --check   # exit 1 when a page is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's worldgym, whatever is installed
from benchmarks.table import replace_table, sync_pages

ENV_DOCS = REPO / "docs" / "envs"
SUMMARY = ("<!-- env-summary:start -->", "<!-- env-summary:end -->")
ARGUMENTS = ("<!-- env-arguments:start -->", "<!-- env-arguments:end -->")


@dataclass(frozen=True)
class EnvPage:
    """One env page: its id, its file under ``docs/envs``, and what the env itself cannot say."""

    env_id: str
    page: str
    reward_range: str  # Gymnasium 1.x envs no longer carry a reward range: stated here, once
    make_kwargs: dict | None = None  # arguments to build it with for its spaces; None: it cannot be built offline
    spaces: tuple[str, str] | None = None  # (action, observation) in words, for an env that cannot be built
    extra: str | None = None  # "needs the X extra"


PAGES: tuple[EnvPage, ...] = (
    EnvPage("CSRPhone-v1", "csr-phone.md", "{0, 1} (plus the optional shaping terms)", {}),
    EnvPage("MathQA-v1", "math-qa.md", "{0, 1}", {}),
    EnvPage("LongHealthQA-v0", "longhealth-qa.md", "{0, 1}", {}),
    EnvPage("ZTokenDigits-v1", "ztoken-digits.md", "[-length_penalty * max_new_tokens, 1]", {}),
    EnvPage("GameBoy-v0", "gameboy.md", "the task's (sprite_goal: see Rewards)", {}, extra="gameboy"),
    EnvPage("ReasoningGym-v0", "reasoning-gym.md", "[0, 1] (the dataset's score)", {"size": 10},
            extra="interop"),
    EnvPage("worldgym/OpenEnv-v0", "openenv.md", "the server's", None,
            ("`ToolCallSpace` of the server's tools, or `Text` (printable ASCII)", "`Text` (printable ASCII)"),
            extra="interop"),
)


def entry_class(env_id: str) -> type:
    """The class behind an id's Gymnasium entry point."""
    import gymnasium as gym

    import worldgym  # noqa: F401  (registers the ids)

    module, name = gym.spec(env_id).entry_point.split(":")
    return getattr(importlib.import_module(module), name)


def docstring_arguments(doc: str, heading: str = "## Arguments") -> dict[str, str]:
    """``name: description`` entries of a docstring section (``## Arguments`` or Google's ``Args:``), in order.

    An entry starts at the section's indentation with ``name:`` (or ``name (type):``); more deeply indented
    lines continue it; the first other line at that indentation, or a blank line, ends the section."""
    lines = inspect.cleandoc(doc).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        return {}
    body = lines[start + 1:]
    indent = len(body[0]) - len(body[0].lstrip()) if body else 0
    entries: dict[str, str] = {}
    name = None
    for line in body:
        if not line.strip():
            break
        depth = len(line) - len(line.lstrip())
        match = re.match(r"(\w+)(?: \([^)]*\))?: (.*)", line.strip())
        if depth == indent and match:
            name = match.group(1)
            entries[name] = match.group(2)
        elif depth > indent and name is not None:
            entries[name] += " " + line.strip()
        else:
            break
    return entries


def markdown(text: str) -> str:
    """Docstring markup as Markdown: ````x```` and Sphinx roles become code spans."""
    text = re.sub(r":(?:class|func|data|mod|meth|attr):`~?([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`"
                  if "~" in m.group(0) else f"`{m.group(1)}`", text)
    return text.replace("``", "`").replace("|", "\\|")


def constructor_arguments(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, description) of every constructor argument; GameBoy's ``**settings`` are the
    fields of its config dataclass. Raises ``ValueError`` naming an argument the docstring does not describe."""
    described = docstring_arguments(cls.__doc__ or "")
    rows = []
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            config = inspect.signature(cls.__init__).parameters["config"].annotation
            config_cls = getattr(sys.modules[cls.__module__], str(config).split(" |")[0])
            config_doc = docstring_arguments(config_cls.__doc__ or "", "Args:")
            for field in dataclasses.fields(config_cls):
                rows.append((field.name, str(field.type), repr(field.default), config_doc.get(field.name, "")))
            continue
        annotation = "" if parameter.annotation is inspect.Parameter.empty else str(parameter.annotation)
        default = "required" if parameter.default is inspect.Parameter.empty else repr(parameter.default)
        rows.append((parameter.name, annotation, default, described.get(parameter.name, "")))
    missing = [name for name, _, _, text in rows if not text]
    if missing:
        raise ValueError(f"{cls.__qualname__}'s docstring describes no {missing}: add `name: description` "
                         "lines to its ## Arguments section")
    return rows


def make_call(page: EnvPage) -> str:
    """The ``gym.make`` call the summary shows: the one its spaces were read from."""
    kwargs = page.make_kwargs if page.make_kwargs is not None else {"base_url": "http://127.0.0.1:8000"}
    return f'gym.make("{page.env_id}"' + "".join(f", {k}={v!r}" for k, v in kwargs.items()) + ")"


def render_summary(page: EnvPage) -> str:
    """The summary table at the top of an env page."""
    import gymnasium as gym

    import worldgym  # noqa: F401  (registers the ids)

    spec = gym.spec(page.env_id)
    cls = entry_class(page.env_id)
    if page.make_kwargs is not None:
        env = gym.make(page.env_id, **page.make_kwargs)
        action, observation = f"`{env.action_space!r}`", f"`{env.observation_space!r}`"
        text_observations = type(env.observation_space).__name__ in ("Text", "UnicodeText")
        env.close()
    else:
        action, observation = page.spaces
        text_observations = True
    if spec.vector_entry_point:
        vector = f"native: `gym.make_vec(\"{page.env_id}\", num_envs=N)` builds `{spec.vector_entry_point}`"
    else:
        vector = "`SyncVectorEnv`; `AsyncVectorEnv`" + (" with `shared_memory=False` (text observations)"
                                                         if text_observations else "")
    modes = ", ".join(f'`"{mode}"`' for mode in cls.metadata.get("render_modes", [])) or "none"
    rows = [("Action Space", action), ("Observation Space", observation),
            ("Import", f"`{make_call(page)}`"),
            ("Reward range", page.reward_range), ("Vector envs", vector), ("Render modes", modes),
            ("Entry point", f"`{spec.entry_point}`")]
    if page.extra:
        rows.append(("Needs", f"the `{page.extra}` extra (`pip install 'worldgym[{page.extra}]'`)"))
    return "\n".join(["| | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def render_arguments(page: EnvPage) -> str:
    """The Arguments table: every constructor argument, its type, default and description."""
    cls = entry_class(page.env_id)
    lines = ["| argument | type | default | description |", "|---|---|---|---|"]
    for name, annotation, default, text in constructor_arguments(cls):
        lines.append(f"| `{name}` | `{markdown(annotation)}` | `{markdown(default)}` | {markdown(text)} |")
    return "\n".join(lines)


def render_page(page: EnvPage, text: str) -> str:
    """The page's text with both generated blocks brought up to date."""
    text = replace_table(text, render_summary(page), *SUMMARY)
    return replace_table(text, render_arguments(page), *ARGUMENTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing: exit 1 when a page is stale")
    args = parser.parse_args(argv)
    pages = {ENV_DOCS / page.page: functools.partial(render_page, page) for page in PAGES}
    return sync_pages(pages, args.check, "python tools/env_pages.py")


if __name__ == "__main__":
    raise SystemExit(main())
