"""Fuzz every registered env with hostile actions; count what escapes (unhandled exceptions, goal 0), steps/s.

Usage: ``python benchmarks/fuzz_envs.py [--steps 1000000] [--seed 0] [--quick] [--results-dir DIR]``; the report
goes to ``benchmarks/results/fuzz_envs.json`` by default. The steps are split evenly over the targets:

  * ``CSRPhone-v1/text``: ``ParseToolCall`` fed model-like text: well-formed calls, calls with hostile
    fragments spliced in (deep nesting, 20,000-digit numbers, NaN/Infinity, lone surrogates, control
    characters, invalid UTF-8 decoded with replacement), tool names that differ by case or a Unicode
    look-alike, wrong argument types, strings up to a megabyte, and non-string actions;
  * ``CSRPhone-v1/tool_call``: raw ``ToolCall`` objects with wrong argument types (huge ints, NaN, bytes,
    sets, lists nested 5,000 deep or holding themselves, numpy values) and objects that are not tool calls;
  * ``MathQA-v1``: the same texts, answers with and without a number, and non-string actions;
  * ``ZTokenDigits-v1``, ``ZTokenDigits-v1/flat`` (``FlattenTokenDigitsAction``) and ``GameBoy-v0`` (vector
    env, 2 emulators, actions and reset masks): valid actions, and wrong ones (floats, NaN, bools, bools among
    integers, strings, ``None``, wrong shapes, values out of range), which must raise ``TypeError`` or
    ``ValueError``;
  * ``MathQA-v1/unicode``: a GSM8K-format file of questions in any script (currency signs, fractions,
    superscripts, non-breaking spaces, U+2028, emoji): each observation must equal its question exactly, or
    differ only by the change ``info["observation_changes"]`` reports (a cut to the space's length);
  * ``CSRPhone-v1/unicode``: ``search_company`` calls written as text with company names of random code points
    (lone surrogates included): the reply must quote the name exactly, or report in ``info`` how it changed it;
  * ``config-files``: random settings files (YAML/JSON) against every example's presets (``config_fuzzer.py``):
    each must load to a valid config or be refused with a ``ConfigError`` naming the file, and fail fast.

Text envs must never raise; an action that is not valid must come back as an observation in the observation
space with its reason in ``info["errors"]`` (``contract_violations`` counts the misses). Envs with typed
actions must accept every valid action and raise ``TypeError``/``ValueError`` for every invalid one; any other
exception is unhandled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.csr_phone.env import CSR_TOOLS
from worldgym.envs.ztoken import FlattenTokenDigitsAction
from worldgym.spaces import ToolCall, ToolCallError
from worldgym.text import OBSERVATION_CHANGES, SAMPLE_CHARSET, fit_observation_text
from worldgym.wrappers import ParseToolCall, format_tool_call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json
from benchmarks.config_fuzzer import EXAMPLES, ConfigFuzzer, load_example, load_outcome

QUICK_STEPS = 600
TOOL_NAMES = [tool.name for tool in CSR_TOOLS]
ARGUMENT_KEYS = ["company", "fields", "phone_number", "auth_info", "zip_code", "pin", "Company", ""]
LOOK_ALIKES = {"a": "\u0430", "o": "\u043e", "e": "\u0435", "c": "\u0441", "p": "\u0440", "i": "\u0131",
               "m": "\uff4d", "n": "\u03b7", "h": "\u04bb", "_": "\u200d_"}
CONSTANTS = ["NaN", "Infinity", "-Infinity", "1e999999", "-0", "1E-99999", "0x10", "01", "true", "null",
             '"\\ud800"', '"\\udfff\\ud800"', '"\\u0000"', '"\\"', "\\", '"', "<tool_call>", "</tool_call>",
             "{", "}", "[", "]", ",", ":", "\ufeff"]
MAX_EXAMPLES = 20  # unhandled exceptions kept per target for the report


class Fuzzer:
    """Hostile values, text and tool calls drawn from a seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def size(self, high: int) -> int:
        """A size in ``[0, high]``, log-uniform so small and huge sizes both occur."""
        return min(high, int(2 ** (self.rng.random() * high.bit_length())))

    def string(self) -> str:
        """Short text: random code points (surrogates included), control characters, decoded junk bytes."""
        rng, kind = self.rng, self.rng.randrange(6)
        if kind == 0:
            return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(12)))
        if kind == 1:
            return "".join(chr(rng.randrange(0xD800, 0xE000)) for _ in range(rng.randrange(1, 4)))
        if kind == 2:
            return "".join(chr(rng.choice([*range(32), 127, 0x85, 0x2028])) for _ in range(rng.randrange(8)))
        if kind == 3:
            errors = rng.choice(["replace", "surrogateescape"])
            return rng.randbytes(rng.randrange(40)).decode("utf-8", errors=errors)
        if kind == 4:
            return rng.choice(["Acme", "1-800-555-0100", "zip_code", "", " ", "Customer Service"])
        return rng.choice("ab{}[]\":,0123456789") * self.size(2 << 20 if rng.random() < 1e-3 else 4096)

    def tool_name(self) -> str:
        """A real tool name, or one that differs by case, a look-alike letter, spacing or a suffix."""
        rng, name = self.rng, self.rng.choice(TOOL_NAMES)
        kind = rng.randrange(7)
        if kind == 0:
            return rng.choice([name.upper(), name.title(), name.swapcase()])
        if kind == 1:
            i = rng.choice([i for i, ch in enumerate(name) if ch in LOOK_ALIKES])
            return name[:i] + LOOK_ALIKES[name[i]] + name[i + 1:]
        if kind == 2:
            return rng.choice([" ", "\t", "\x00", "\ufeff"]) + name + rng.choice(["()", "\u200b", "\ud800"])
        if kind == 3:
            return self.string()
        return name

    def fragment(self) -> str:
        """A piece of text a JSON parser chokes on."""
        rng, kind = self.rng, self.rng.randrange(7)
        if kind == 0:
            depth = self.size(5000)
            return rng.choice(["[" * depth + "]" * depth, '{"a": ' * depth + "1" + "}" * depth, "[" * depth])
        if kind == 1:
            return rng.choice(["", "-"]) + "9" * max(1, self.size(20_000)) + rng.choice(["", ".5", "e999"])
        if kind in (2, 3):
            return rng.choice(CONSTANTS)
        if kind == 4:
            return json.dumps(self.string())
        return self.string()

    def json_value(self, depth: int = 0) -> Any:
        """A JSON value of a random (usually wrong) type."""
        rng, kind = self.rng, self.rng.randrange(9 if depth < 3 else 7)
        if kind == 0:
            return rng.choice([None, True, False, 0, -1, 1.5, 10**20, float("nan"), float("inf")])
        if kind in (1, 2):
            return self.string()
        if kind == 3:
            return rng.choice(["Acme", "1-800-555-0100", ["zip_code"], {"zip_code": "02139"}, ["pin", "pin"]])
        if kind in (4, 5, 6):
            return rng.randrange(-(10**6), 10**6) if kind == 4 else rng.random() * 10 ** rng.randrange(300)
        if kind == 7:
            return [self.json_value(depth + 1) for _ in range(rng.randrange(4))]
        return {self.argument_key(): self.json_value(depth + 1) for _ in range(rng.randrange(4))}

    def unicode_text(self, length: int) -> str:
        """Text of ``length`` characters: the documented sample charset, or any code point but surrogates."""
        if self.rng.random() < 0.5:
            return "".join(self.rng.choice(SAMPLE_CHARSET) for _ in range(length))
        points = (self.rng.randrange(0x110000 - 0x800) for _ in range(length))
        return "".join(chr(p + 0x800 if p >= 0xD800 else p) for p in points)

    def argument_key(self) -> str:
        return self.rng.choice(ARGUMENT_KEYS) if self.rng.random() < 0.8 else self.string()

    def text(self, sample_call: Callable[[], ToolCall]) -> Any:
        """What a model might write (or a caller might pass) as a reply."""
        rng, kind = self.rng, self.rng.randrange(10)
        if kind == 0:
            return format_tool_call(sample_call())
        if kind == 1:
            body = format_tool_call(sample_call())
            at = rng.randrange(len(body) + 1)
            return body[:at] + self.fragment() + body[at:]
        if kind == 2:
            return format_tool_call(sample_call())[: rng.randrange(60)]
        if kind == 3:
            arguments = {self.argument_key(): self.json_value() for _ in range(rng.randrange(4))}
            payload = {"name": self.tool_name(), "arguments": arguments}
            return f"<tool_call>{json.dumps(payload)}</tool_call>"
        if kind == 4:
            name, arguments = json.dumps(self.tool_name()), json.dumps(self.fragment())
            return f'<tool_call>{{"name": {name}, "arguments": {arguments}}}'
        if kind == 5:
            issue = rng.choice([
                '{"name": "search_company", "arguments": ' + "[" * self.size(5000) + "]}",
                '{"name": "search_company", "arguments": {"company": ' + "1" * self.size(20_000) + "}}",
            ])
            return f"<tool_call>{issue}</tool_call>"
        if kind == 6:
            return "<tool_call>" + "".join(self.fragment() for _ in range(rng.randrange(1, 5)))
        if kind == 7:
            return self.string() + rng.choice(["", "<tool_call>", "</tool_call>"]) + self.string()
        if kind == 8:
            return rng.choice([None, 3, 1.5, b"<tool_call>", ["x"], {"name": "search_company"}, np.zeros(2)])
        return "".join(self.fragment() for _ in range(rng.randrange(1, 4)))

    def odd_value(self) -> Any:
        """A Python value no JSON parser would produce."""
        rng, kind = self.rng, self.rng.randrange(8)
        if kind == 0:
            return 10 ** self.size(20_000)
        if kind == 1:
            nested: list = []
            for _ in range(self.size(5000)):
                nested = [nested]
            return nested
        if kind == 2:
            cycle: list = []
            cycle.append(cycle)
            return cycle if rng.random() < 0.5 else {"zip_code": cycle}
        if kind == 3:
            return rng.choice([b"Acme", {"zip_code"}, ("zip_code",), np.array(["zip_code"]), np.int64(3),
                               np.float32("nan"), object(), range(3), frozenset(), 1 + 2j])
        return self.json_value()

    def tool_call(self, sample_call: Callable[[], ToolCall]) -> Any:
        """A raw action for a tool env: valid calls, calls with odd arguments, things that are not calls."""
        rng, kind = self.rng, self.rng.randrange(6)
        if kind == 0:
            return sample_call()
        if kind in (1, 2):
            arguments = {self.argument_key(): self.odd_value() for _ in range(rng.randrange(4))}
            return ToolCall(rng.choice([self.tool_name(), *TOOL_NAMES]), arguments)
        if kind == 3:
            return ToolCall(rng.choice([self.tool_name(), None, 3, ["x"]]), self.odd_value())
        if kind == 4:
            message = rng.choice([self.string(), "", None])  # a caller's error may have no message
            return ToolCallError(message, self.string())  # type: ignore[arg-type]
        return rng.choice([None, 3, self.string(), {"name": "search_company"}, np.zeros(3), ["x"]])

    def integer_action(self, shape: tuple[int, ...], high: Any) -> tuple[Any, bool]:
        """``(action, valid)``: integers in ``[0, high)`` of ``shape`` in an accepted form, or a bad one."""
        rng = self.rng
        good = np.array([rng.randrange(int(h)) for h in np.broadcast_to(high, shape).flat],
                        dtype=rng.choice([np.int64, np.int32, np.uint8])).reshape(shape)
        if rng.random() < 0.5:
            return (good.tolist() if rng.random() < 0.5 else good), True
        kind = rng.randrange(9)
        if kind == 0:
            return good.astype(np.float64), False
        if kind == 1:
            return good + 0.5, False
        if kind == 2:
            return np.full(shape, float("nan")), False
        if kind == 3:
            return good.astype(bool), False
        if kind == 4:
            return np.zeros((*shape, 2), dtype=np.int64) if shape else [0, 0], False
        if kind == 5:
            bad = good.astype(object)
            outside = rng.choice([-1, int(np.max(high)), 2**70, -(2**63) - 1])
            bad.flat[rng.randrange(max(1, bad.size))] = outside
            return (bad.item() if not shape else bad.tolist()), False
        if kind == 6:  # a bool among integers (numpy would read it as 0 or 1)
            if not shape:
                return rng.choice([True, np.False_]), False
            items = good.reshape(-1).tolist()
            items[rng.randrange(len(items))] = rng.choice([True, False, np.True_])
            return np.array(items, dtype=object).reshape(shape).tolist(), False
        return rng.choice([None, "3", b"1", [], {"token": 1}, object(), 1.0]), False


@dataclass
class Tally:
    """What one target's steps produced."""

    steps: int = 0
    seconds: float = 0.0
    rejected_with_typed_error: int = 0
    invalid_observations: int = 0
    unhandled_exceptions: int = 0
    contract_violations: int = 0
    accepted: int = 0  # settings files that loaded to a valid config
    slowest_refusal_s: float = 0.0
    errors: Counter = field(default_factory=Counter)
    examples: list[dict[str, str]] = field(default_factory=list)

    def unhandled(self, kind: str, error: BaseException | None, action: Any, detail: str = "") -> None:
        """Record an escaped exception (``kind="exception"``) or a broken contract."""
        if kind == "exception":
            self.unhandled_exceptions += 1
        else:
            self.contract_violations += 1
        label = f"{kind}: {type(error).__name__ if error else detail}"
        self.errors[label] += 1
        if len(self.examples) < MAX_EXAMPLES:
            message = str(error or detail)[:300]
            self.examples.append({"kind": label, "message": message, "action": _brief(action)})

    def report(self) -> dict[str, Any]:
        return {"steps": self.steps, "seconds_in_env": self.seconds,
                "steps_per_s": self.steps / max(self.seconds, 1e-9),
                "rejected_with_typed_error": self.rejected_with_typed_error,
                "invalid_observations": self.invalid_observations,
                "unhandled_exceptions": self.unhandled_exceptions,
                "contract_violations": self.contract_violations,
                "accepted": self.accepted, "slowest_refusal_s": self.slowest_refusal_s,
                "error_kinds": dict(self.errors), "examples": self.examples}


def _brief(action: Any, limit: int = 200) -> str:
    try:
        text = repr(action)
    except Exception:  # noqa: BLE001 - a repr that fails (a 20,000-digit int) must not stop the report
        text = f"<{type(action).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fuzz_text_env(env: gym.Env, next_action: Callable[[], Any], steps: int, seed: int, tally: Tally) -> None:
    """Step a text env with fuzzed actions; nothing may raise and invalid actions must explain themselves."""
    in_space = env.observation_space.contains
    env.reset(seed=seed)
    for _ in range(steps):
        action = next_action()
        start = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = env.step(action)
        except Exception as error:  # noqa: BLE001 - counting what escapes is the point
            tally.seconds += time.perf_counter() - start
            tally.unhandled("exception", error, action)
            env.reset()
            continue
        if terminated or truncated:
            env.reset()
        tally.seconds += time.perf_counter() - start
        tally.steps += 1
        if not in_space(observation) or not isinstance(reward, float):
            tally.unhandled("contract", None, action, "observation outside the space or non-float reward")
        non_text_answer = "predicted" in info and not isinstance(action, str)  # MathQA
        invalid = info.get("response_type") == "invalid_call" or non_text_answer
        if info.get("errors"):
            tally.invalid_observations += 1
        elif invalid:
            tally.unhandled("contract", None, action, "invalid action without info['errors']")


def fuzz_typed_env(calls: dict[str, Callable[[Any], None]], next_action: Callable[[], tuple[str, Any, bool]],
                   steps: int, tally: Tally) -> None:
    """Step an env with typed actions: valid ones must work, invalid ones raise ``TypeError``/``ValueError``.

    ``next_action`` returns ``(call, action, valid)``: ``calls[call](action)`` steps (resetting ended
    episodes) or resets with ``action`` as an option.
    """
    for _ in range(steps):
        call, action, valid = next_action()
        start = time.perf_counter()
        try:
            calls[call](action)
        except (TypeError, ValueError) as error:
            tally.seconds += time.perf_counter() - start
            tally.steps += 1
            if valid:
                tally.unhandled("exception", error, action)
            else:
                tally.rejected_with_typed_error += 1
            continue
        except Exception as error:  # noqa: BLE001
            tally.seconds += time.perf_counter() - start
            tally.unhandled("exception", error, action)
            continue
        tally.seconds += time.perf_counter() - start
        tally.steps += 1
        if not valid:
            tally.unhandled("contract", None, action, "invalid action accepted")


def _targets(fuzzer: Fuzzer, seed: int) -> dict[str, Callable[[int, Tally], None]]:
    """Target name -> ``run(steps, tally)``."""

    def csr_text(steps: int, tally: Tally) -> None:
        env = ParseToolCall(gym.make("CSRPhone-v1"))
        space = env.unwrapped.action_space
        space.seed(seed)
        fuzz_text_env(env, lambda: fuzzer.text(space.sample), steps, seed, tally)

    def csr_tool_call(steps: int, tally: Tally) -> None:
        env = gym.make("CSRPhone-v1")
        env.action_space.seed(seed)
        fuzz_text_env(env, lambda: fuzzer.tool_call(env.action_space.sample), steps, seed, tally)

    def math_qa(steps: int, tally: Tally) -> None:
        env = gym.make("MathQA-v1", num_problems=100)
        answers = ["#### 42", "The answer is $1,200.", "\\boxed{7}", "I am not sure."]
        csr_calls = ToolCall("search_company", {"company": "Acme"})
        fuzz_text_env(env, lambda: fuzzer.rng.choice(answers) if fuzzer.rng.random() < 0.2
                      else fuzzer.text(lambda: csr_calls), steps, seed, tally)

    def ztoken(flat: bool) -> Callable[[int, Tally], None]:
        def run(steps: int, tally: Tally) -> None:
            env = gym.make("ZTokenDigits-v1", max_new_tokens=4)
            if flat:
                env = FlattenTokenDigitsAction(env)
            high = env.unwrapped.action_space["token"].n
            env.reset(seed=seed)

            def next_action() -> tuple[str, Any, bool]:
                if flat:
                    return ("step", *fuzzer.integer_action(env.action_space.shape, env.action_space.nvec))
                token, token_ok = fuzzer.integer_action((), high)
                digits, digits_ok = fuzzer.integer_action((5,), 10)
                if fuzzer.rng.random() < 0.05:
                    return "step", fuzzer.rng.choice([None, (token, digits), {"token": token}, "x"]), False
                return "step", {"token": token, "digits": digits}, token_ok and digits_ok

            def step(action: Any) -> None:
                if any(env.step(action)[2:4]):
                    env.reset()

            fuzz_typed_env({"step": step}, next_action, steps, tally)
        return run

    def gameboy(steps: int, tally: Tally) -> None:
        env = gym.make_vec("GameBoy-v0", num_envs=2)
        env.reset(seed=seed)

        def next_action() -> tuple[str, Any, bool]:
            if fuzzer.rng.random() < 0.1:  # a reset mask: booleans of shape (2,), or integers and junk
                mask, integers = fuzzer.integer_action((2,), 2)
                if integers and fuzzer.rng.random() < 0.7:
                    mask = np.asarray(mask).astype(bool)
                valid = isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (2,)
                return "reset", mask, valid
            return ("step", *fuzzer.integer_action((2,), env.single_action_space.n))

        fuzz_typed_env({"step": env.step, "reset": lambda mask: env.reset(options={"reset_mask": mask})},
                       next_action, steps, tally)  # the vector env resets finished episodes itself

    def math_qa_unicode(steps: int, tally: Tally) -> None:
        path = Path(tempfile.mkdtemp()) / "gsm8k.jsonl"
        questions = [fuzzer.unicode_text(fuzzer.size(3000)) or "?" for _ in range(64)]
        path.write_text("".join(json.dumps({"question": q, "answer": "#### 1"}, ensure_ascii=fuzzer.rng.random() < 0.5)
                                + "\n" for q in questions), encoding="utf-8")
        env = gym.make("MathQA-v1", dataset_path=str(path), max_question_chars=2048)
        for step in range(steps):
            index = fuzzer.rng.randrange(len(questions))
            start = time.perf_counter()
            try:
                observation, info = env.reset(seed=step, options={"index": index})
                env.step(fuzzer.unicode_text(fuzzer.size(200)))
            except Exception as error:  # noqa: BLE001
                tally.unhandled("exception", error, questions[index])
                continue
            finally:
                tally.seconds += time.perf_counter() - start
            tally.steps += 1
            expected, changes = fit_observation_text(questions[index], 2048)
            if observation != expected or info.get(OBSERVATION_CHANGES, {}) != changes:
                tally.unhandled("contract", None, questions[index], "question altered without a reported change")

    def csr_unicode(steps: int, tally: Tally) -> None:
        env = ParseToolCall(gym.make("CSRPhone-v1"))
        env.reset(seed=seed)
        for _ in range(steps):
            name = fuzzer.unicode_text(fuzzer.size(60)) if fuzzer.rng.random() < 0.8 else fuzzer.string()
            reply = format_tool_call(ToolCall("search_company", {"company": name}))
            start = time.perf_counter()
            try:
                observation, _, terminated, truncated, info = env.step(reply)
            except Exception as error:  # noqa: BLE001
                tally.seconds += time.perf_counter() - start
                tally.unhandled("exception", error, reply)
                env.reset()
                continue
            tally.seconds += time.perf_counter() - start
            tally.steps += 1
            if terminated or truncated:
                env.reset()
            quoted = f'No company named "{name}"' in observation or info["response_type"] != "company_not_found"
            if info.get("errors"):
                tally.invalid_observations += 1
            elif not quoted and OBSERVATION_CHANGES not in info:
                tally.unhandled("contract", None, reply, "company name altered without a reported change")

    def config_files(steps: int, tally: Tally) -> None:
        presets = [load_example(name).PRESETS for name in EXAMPLES]
        configs = ConfigFuzzer(fuzzer.rng)
        folder = Path(tempfile.mkdtemp())
        for step in range(steps):
            chosen = presets[step % len(presets)]
            suffix, text = configs.document(chosen)
            file = folder / f"settings{suffix}"
            file.write_bytes(text.encode("utf-8", errors="surrogatepass"))
            start = time.perf_counter()
            try:
                outcome, detail = load_outcome(file, chosen)
            except Exception as error:  # noqa: BLE001 - anything but a ConfigError escaped from the library
                tally.seconds += time.perf_counter() - start
                tally.unhandled("exception", error, text)
                continue
            elapsed = time.perf_counter() - start
            tally.seconds += elapsed
            tally.steps += 1
            if outcome == "violation":
                tally.unhandled("contract", None, text, detail)
            elif outcome == "refused":
                tally.rejected_with_typed_error += 1
                tally.slowest_refusal_s = max(tally.slowest_refusal_s, elapsed)
            else:
                tally.accepted += 1

    return {"CSRPhone-v1/text": csr_text, "CSRPhone-v1/tool_call": csr_tool_call, "MathQA-v1": math_qa,
            "ZTokenDigits-v1": ztoken(flat=False), "ZTokenDigits-v1/flat": ztoken(flat=True),
            "GameBoy-v0": gameboy, "MathQA-v1/unicode": math_qa_unicode, "CSRPhone-v1/unicode": csr_unicode,
            "config-files": config_files}


def _split(total: int, parts: int) -> Iterator[int]:
    for i in range(parts):
        yield total // parts + (i < total % parts)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the fuzzer, print a summary, write JSON; exits non-zero when anything escaped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--steps", type=int, default=None,
                        help=f"fuzzed steps, split over the targets (default 1,000,000; {QUICK_STEPS} with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = QUICK_STEPS if args.quick else 1_000_000
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    targets = _targets(Fuzzer(args.seed), args.seed)
    results: dict[str, Any] = {
        "command": f"python benchmarks/fuzz_envs.py --steps {args.steps} --seed {args.seed}",
        "quick": args.quick,
        "goal_unhandled_exceptions": 0,
        "python": platform.python_version(), "numpy": np.__version__, "gymnasium": gym.__version__,
        "machine": platform.machine(), "cpu_count": os.cpu_count(), "load_average_before": os.getloadavg()[0],
        "targets": {},
    }
    wall = time.perf_counter()
    for (name, run), steps in zip(targets.items(), _split(args.steps, len(targets))):
        tally = Tally()
        run(steps, tally)
        results["targets"][name] = report = tally.report()
        print(f"{name:>22}: {report['steps']:>9,} steps, {report['steps_per_s']:>9,.0f} steps/s | "
              f"typed errors {report['rejected_with_typed_error']:>7,} | invalid observations "
              f"{report['invalid_observations']:>7,} | unhandled {report['unhandled_exceptions']} | "
              f"contract violations {report['contract_violations']}")
        if name == "config-files":
            print(f"{'':>24}{report['accepted']:,} loaded to a valid config, {report['rejected_with_typed_error']:,} "
                  f"refused with a ConfigError (slowest {report['slowest_refusal_s'] * 1000:.0f} ms)")
        for kind, count in report["error_kinds"].items():
            print(f"{'':>24}{count:>7,} x {kind}")
    reports = results["targets"].values()
    results["total_steps"] = sum(r["steps"] for r in reports)
    results["unhandled_exceptions"] = sum(r["unhandled_exceptions"] for r in reports)
    results["contract_violations"] = sum(r["contract_violations"] for r in reports)
    results["wall_seconds"] = time.perf_counter() - wall
    results["steps_per_s_in_env"] = results["total_steps"] / sum(r["seconds_in_env"] for r in reports)
    results["load_average_after"] = os.getloadavg()[0]
    results["goal_met"] = results["unhandled_exceptions"] == 0 and results["contract_violations"] == 0
    verdict = "met" if results["goal_met"] else "NOT met"
    print(f"{results['total_steps']:,} fuzzed steps in {results['wall_seconds']:.1f} s "
          f"({results['steps_per_s_in_env']:,.0f} steps/s inside the envs): "
          f"{results['unhandled_exceptions']} unhandled exceptions, "
          f"{results['contract_violations']} contract violations (goal 0: {verdict})")
    write_json(results_dir(args) / "fuzz_envs.json", results, indent=2)
    return results


if __name__ == "__main__":
    raise SystemExit(0 if main()["goal_met"] else 1)
