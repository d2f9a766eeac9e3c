"""``CSRPhoneEnv`` (CSRPhone-v1): complete a customer's task by searching companies and phoning their CSRs."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from worldgym.config import check_choice, check_field
from worldgym.envs.csr_phone.csr import CSRSimulator
from worldgym.envs.csr_phone.profiles import FIELD_PHRASES, generate_profile
from worldgym.envs.csr_phone.tasks import Task, sample_task, task_prompt
from worldgym.envs.csr_phone.world import DIFFICULTIES, SPLITS, Split, World, get_world
from worldgym.envs.tool_env import ToolEnv, ToolResult
from worldgym.spaces import COPY_ANNOTATION, Tool, ToolCall, ToolCallError

__all__ = ["CSR_TOOLS", "CSRPhoneEnv"]

# Company names, phone numbers and auth values are copied from earlier observations (the annotation constrained
# decoding and the copy probe read); reset and step infos list them in ``info["observed_values"]``.
_AUTH_VALUE = {"type": "string", "maxLength": 100, COPY_ANNOTATION: True}
_PHONE_NUMBER = re.compile(r"\b1-8\d\d-\d{3}-\d{4}\b")
_FIELD_LIST = ", ".join(f"{key} ({phrase})" for key, phrase in FIELD_PHRASES.items())
CSR_TOOLS: tuple[Tool, ...] = (
    Tool("search_company", "Look up a company in the phone book; returns its departments and phone numbers, "
         "plus companies with similar names.", {
             "type": "object",
             "properties": {"company": {"type": "string", "minLength": 1, "maxLength": 100,
                                        COPY_ANNOTATION: True}},
             "required": ["company"],
             "additionalProperties": False,
         }),
    Tool("auth_info_form", "Read the customer's values for profile fields (to answer a representative's "
         f"security questions). Fields: {_FIELD_LIST}.", {
             "type": "object",
             "properties": {"fields": {"type": "array", "minItems": 1, "maxItems": 16, "uniqueItems": True,
                                       "items": {"type": "string", "minLength": 1, "maxLength": 50}}},
             "required": ["fields"],
             "additionalProperties": False,
         }),
    Tool("make_phone_call", "Call a phone number, offering the given authentication details; returns what "
         "the representative says.", {
             "type": "object",
             "properties": {
                 "phone_number": {"type": "string", "minLength": 1, "maxLength": 32, COPY_ANNOTATION: True},
                 "auth_info": {"type": "object", "additionalProperties": False,
                               "properties": {key: _AUTH_VALUE for key in FIELD_PHRASES}},
             },
             "required": ["phone_number"],
             "additionalProperties": False,
         }),
)


class CSRPhoneEnv(ToolEnv):
    """Customer-service phone calls with three tools; a procedurally generated world of companies.

    ## Description
    The agent acts for a customer with a goal at a company ("dispute a charge on your phone bill at Norford
    Wireless"). It finds the company's departments with ``search_company``, reads the customer's details with
    ``auth_info_form`` and phones departments with ``make_phone_call``. Representatives ask for missing
    authentication fields, reject wrong values, route callers, send them to a department that must act first
    (prerequisite chains), or complete the task. Every company has a "Customer Service" line that routes
    callers to the department handling their goal. Replies are paraphrases drawn from the env's RNG;
    everything else (phone book, customer values) is deterministic given the world and the episode's task.

    ## Action space
    :class:`worldgym.spaces.ToolCallSpace` of ``search_company(company)``, ``auth_info_form(fields)`` and
    ``make_phone_call(phone_number, auth_info)``. Wrap with :class:`worldgym.wrappers.ParseToolCall` to act
    with raw Hermes-style text.

    ## Observation space
    :class:`worldgym.text.UnicodeText`: the task prompt on reset, then each tool's result or the
    representative's reply; names and values keep every character (a company or customer name in any script
    round-trips through the tools).

    ## Rewards
    1.0 on the call that completes the task, else 0. Optional shaping (off by default): ``prerequisite_bonus``
    for each prerequisite step completed for the first time, ``step_penalty`` subtracted on every tool call.

    ## Episode end
    Terminated when the task is complete; truncated after ``max_turns`` (16) tool calls, invalid ones
    included.

    ## Info
    Reset: ``tools`` (OpenAI format), ``difficulty``, ``company``, ``goal``, ``split``, ``observed_values``
    (the company name, which ``search_company`` copies). Step: ``turn``,
    ``tool``, for phone calls the ``company`` and ``department`` reached (None for unknown numbers),
    ``response_type`` (``search_results``, ``company_not_found``, ``auth_form``, one of
    :data:`worldgym.envs.csr_phone.phrases.RESPONSE_TYPES`, or ``invalid_call``), ``success`` (``True`` on
    the call that completes the task: the success key every worldgym env reports), ``task_complete`` (the
    same value, kept for v0 users) and ``observed_values``: the company names, phone numbers and customer
    values the observation shows, which later calls copy (the schema marks those arguments with
    :data:`worldgym.spaces.COPY_ANNOTATION`).

    ## Arguments
    difficulty: 1-5, or None to draw one per episode (1: 2-3 departments, 1 auth field, department named;
        3: routing needed, 1 prerequisite, 1 name-alike company; 5: 6-8 departments, 3-4 auth fields,
        2 prerequisites, 3 name-alike companies; see ``world.DIFFICULTIES``).
    split: which companies tasks come from: "train", "validation" or "test" (disjoint company sets).
    world_seed: seed of the generated world (companies, departments, numbers); episodes are seeded by
        ``reset``.
    prerequisite_bonus: reward for each prerequisite step completed for the first time (0.0: off).
    step_penalty: reward subtracted on every tool call (0.0: off).
    max_turns: tool calls per episode, invalid ones included; then the episode is truncated.
    render_mode: None or "ansi" (the transcript so far).

    ## Vector envs
    Works in ``gymnasium.vector.SyncVectorEnv`` and ``AsyncVectorEnv``; pass ``shared_memory=False`` to the
    latter (gymnasium 1.4's shared memory garbles ``Text`` observations).

    ## Version History
    * v1: one ``service_provided`` paraphrase no longer repeats "on your account" after a reason that ends
      with it (the observations change; response types, rewards and RNG draws do not); tool-call text that is
      nested too deeply or holds an overlong number, NaN or Infinity is an invalid call instead of an
      exception; observations keep every Unicode character (characters outside printable ASCII used to become
      ``?``) and company names are compared with letters of any script.
    * v0: initial version, retired: ``gym.make("CSRPhone-v0")`` raises Gymnasium's ``DeprecatedEnv`` naming
      CSRPhone-v1.
    """

    def __init__(self, difficulty: int | None = None, split: Split = "train", world_seed: int = 0,
                 prerequisite_bonus: float = 0.0, step_penalty: float = 0.0, max_turns: int = 16,
                 render_mode: str | None = None):
        is_difficulty = not isinstance(difficulty, (bool, np.bool_)) and difficulty in DIFFICULTIES
        check_field(difficulty is None or is_difficulty, "difficulty", difficulty,
                    f"use one of {[*sorted(DIFFICULTIES), None]}")
        check_choice("split", split, SPLITS)
        check_field(isinstance(world_seed, int) and not isinstance(world_seed, bool) and world_seed >= 0,
                    "world_seed", world_seed, "use an integer >= 0")
        for name, value in (("prerequisite_bonus", prerequisite_bonus), ("step_penalty", step_penalty)):
            finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            check_field(finite and value >= 0, name, value, "use a finite number >= 0 (0 disables it)")
        super().__init__(CSR_TOOLS, max_turns=max_turns, render_mode=render_mode)
        self.difficulty = difficulty
        self.split: Split = split
        self.world_seed = world_seed
        self.prerequisite_bonus = float(prerequisite_bonus)
        self.step_penalty = float(step_penalty)
        self.world: World = get_world(world_seed)
        self.task: Task | None = None
        self._csr: CSRSimulator | None = None
        self._search_cache: dict[str, tuple[str, dict[str, Any]]] = {}

    def _reset_task(self, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        difficulty = (options or {}).get("difficulty", self.difficulty)
        if difficulty is None:
            difficulty = int(self.np_random.integers(1, len(DIFFICULTIES) + 1))
        elif isinstance(difficulty, (bool, np.bool_)) or difficulty not in DIFFICULTIES:
            raise ValueError(
                f"options['difficulty'] must be one of {sorted(DIFFICULTIES)}, got {difficulty!r}")
        profile = generate_profile(self.np_random)
        self.task = sample_task(self.world, self.split, difficulty, profile, self.np_random)
        self._csr = CSRSimulator(self.world, self.task)
        info = {"difficulty": difficulty, "company": self.task.company.name, "goal": self.task.goal,
                "split": self.split, "observed_values": [self.task.company.name]}
        return task_prompt(self.task, self.max_turns), info

    def step(self, action: ToolCall | ToolCallError) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = super().step(action)
        info.setdefault("task_complete", False)
        values = list(info.get("values", {}).values()) if info["response_type"] == "auth_form" else []
        names = [name for name in info.get("companies", ()) if name in observation]  # search results, hints
        info["observed_values"] = [*names, *_PHONE_NUMBER.findall(observation), *values]
        if self.step_penalty:
            reward -= self.step_penalty
        return observation, reward, terminated, truncated, info

    def _require_csr(self) -> CSRSimulator:
        if self._csr is None:
            raise gym.error.ResetNeeded("Call reset() before step().")
        return self._csr

    def _call_tool(self, call: ToolCall) -> ToolResult:
        arguments = call.arguments
        if call.name == "search_company":
            text, info = self._search(arguments["company"])
            return ToolResult(text, info={"tool": call.name, **info, "task_complete": False})
        if call.name == "auth_info_form":
            return self._auth_form(arguments["fields"])
        return self._phone_call(arguments["phone_number"], arguments.get("auth_info", {}))

    def _search(self, query: str) -> tuple[str, dict[str, Any]]:
        cached = self._search_cache.get(query)
        if cached is not None:
            return cached
        exact, companies = self.world.search(query)
        if exact:
            listing = "\n".join(f"[{i + 1}] {c.directory_text()}" for i, c in enumerate(companies))
            result = (f'Search results for "{query}" ({len(companies)} companies):\n{listing}',
                      {"response_type": "search_results", "companies": tuple(c.name for c in companies)})
        else:
            hint = f" Did you mean: {'; '.join(c.name for c in companies)}?" if companies else ""
            result = (f'No company named "{query}" was found.{hint}',
                      {"response_type": "company_not_found", "companies": tuple(c.name for c in companies)})
        if len(self._search_cache) < 4096:
            self._search_cache[query] = result
        return result

    def _auth_form(self, fields: list[str]) -> ToolResult:
        values = self._require_csr().task.profile.values
        known = [f for f in fields if f in values]
        unknown = [f for f in fields if f not in values]
        lines = ["Customer details:"] + [f"  {f}: {values[f]}" for f in known]
        if unknown:
            lines.append(f"Unknown fields (not in the profile): {', '.join(unknown)}. "
                         f"Known fields: {', '.join(FIELD_PHRASES)}.")
        info = {"tool": "auth_info_form", "response_type": "auth_form", "task_complete": False,
                "values": {f: values[f] for f in known}, "unknown_fields": unknown}
        return ToolResult("\n".join(lines), info=info)

    def _phone_call(self, phone_number: str, auth_info: Mapping[str, Any]) -> ToolResult:
        outcome = self._require_csr().call(phone_number, auth_info, self.np_random)
        reward = 1.0 if outcome.task_complete else 0.0
        if outcome.completed_prerequisite is not None:
            reward += self.prerequisite_bonus
        info = {"tool": "make_phone_call", "response_type": outcome.response_type,
                "task_complete": outcome.task_complete, "company": outcome.company,
                "department": outcome.department}
        return ToolResult(outcome.text, reward=reward, terminated=outcome.task_complete, info=info,
                          success=outcome.task_complete)
