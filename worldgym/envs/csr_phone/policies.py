"""Reference policies for CSRPhone-v1: a scripted expert and a random baseline, acting on env output only.

Both read nothing but what an LLM agent would see: the observation text, ``info["response_type"]`` and the
tool schemas in the reset ``info["tools"]``. Neither touches env internals, so they also run behind
:class:`worldgym.wrappers.ParseToolCall` via :class:`TextPolicy`.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import numpy as np

from worldgym.spaces import ToolCall
from worldgym.wrappers import format_tool_call

__all__ = ["ROUTER_DEPARTMENT", "CSRPolicy", "ExpertPolicy", "RandomPolicy", "TextPolicy"]

# The documented convention of CSRPhone-v1: every company's general line, which routes callers.
ROUTER_DEPARTMENT = "Customer Service"

_PROMPT_FIELD = re.compile(r"^(Company|Department): (.+)$", re.MULTILINE)
_FIELD_LIST = re.compile(r"(\w+) \(([^)]+)\)")
_DIRECTORY_LINE = re.compile(r"^    (.+): (\S+)$")
_FORM_LINE = re.compile(r"^  (\w+): (.+)$", re.MULTILINE)
_PHONE_NUMBER = re.compile(r"\b1-8\d\d-\d{3}-\d{4}\b")


class CSRPolicy(Protocol):
    """What the evaluation loop needs from a policy."""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Start an episode from the reset observation and info."""

    def act(self, observation: str, info: dict[str, Any]) -> ToolCall:
        """The next tool call, given the latest observation and info."""


def _field_phrases(info: dict[str, Any]) -> dict[str, str]:
    """Field key -> spoken phrase, read from the ``auth_info_form`` tool description in the reset info."""
    for tool in info.get("tools", ()):
        function = tool.get("function", {})
        if function.get("name") == "auth_info_form":
            listing = function.get("description", "").split("Fields:", 1)[-1]
            return {key: phrase for key, phrase in _FIELD_LIST.findall(listing)}
    raise ValueError("reset info has no 'auth_info_form' tool description to read the field names from")


class ExpertPolicy:
    """Scripted expert: search, follow the CSRs' routing and prerequisites, fetch the fields they ask for.

    It keeps a stack of departments to visit: the named department (or Customer Service, which routes), then
    every prerequisite a CSR names on top. Authentication values it has read are offered on every call.

    It can also recover from calls it did not choose (:meth:`executed`, :meth:`mistake`): a reply from a number
    that is not the department it means to reach is ignored, and it carries on with its plan.
    """

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}
        self._company = ""
        self._directory: dict[str, str] = {}
        self._other_numbers: list[str] = []  # the search's numbers of other (similarly named) companies
        self._auth: dict[str, str] = {}
        self._stack: list[str] = []
        self._wanted: list[str] = []
        self._last: ToolCall | None = None

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Read the company and (if given) the department from the prompt, and the field vocabulary."""
        prompt = dict(_PROMPT_FIELD.findall(observation))
        self._fields = _field_phrases(info)
        self._company = prompt.get("Company", "")
        self._stack = [prompt.get("Department", ROUTER_DEPARTMENT)]
        self._directory, self._other_numbers, self._auth, self._wanted, self._last = {}, [], {}, [], None

    def act(self, observation: str, info: dict[str, Any]) -> ToolCall:
        """Digest the last result, then: search first, fetch requested fields, else call the stack top."""
        if self._last is not None:
            self._digest(self._last, observation, info.get("response_type", ""))
        if not self._directory:
            call = ToolCall("search_company", {"company": self._company})
        elif self._wanted:
            call = ToolCall("auth_info_form", {"fields": self._wanted})
        else:
            call = self._call_top()
        self._last = call
        return call

    def _top_number(self) -> str:
        """The number of the department it means to reach ("" when the search did not list it)."""
        return self._directory.get(self._stack[-1], "")

    def _call_top(self) -> ToolCall:
        """A call to the department it means to reach, offering every value it has read."""
        return ToolCall("make_phone_call", {"phone_number": self._top_number(), "auth_info": dict(self._auth)})

    def executed(self, call: ToolCall) -> None:
        """Record that ``call`` ran instead of the one :meth:`act` returned: its result is the one digested next."""
        self._last = call

    def mistake(self, call: ToolCall, rng: np.random.Generator) -> ToolCall | None:
        """A typical agent mistake in place of ``call`` (the next correct call), or None when none fits: dialling
        a similarly named company's number, dialling the last number again, or calling without fetching the
        details a representative asked for. None of them changes the task's state, so the expert's plan still
        holds after it (run it through :meth:`executed`)."""
        options: list[ToolCall] = []
        if call.name == "make_phone_call" and self._other_numbers:
            number = self._other_numbers[int(rng.integers(len(self._other_numbers)))]
            options.append(ToolCall("make_phone_call", {**call.arguments, "phone_number": number}))
        last = self._last
        if (call.name == "make_phone_call" and last is not None and last.name == "make_phone_call"
                and last.arguments.get("phone_number") != call.arguments["phone_number"]):
            options.append(last)
        if call.name == "auth_info_form" and self._top_number():
            options.append(self._call_top())
        return options[int(rng.integers(len(options)))] if options else None

    def _digest(self, call: ToolCall, observation: str, response_type: str) -> None:
        if call.name == "search_company":
            self._directory = _read_directory(observation, self._company)
            known = set(self._directory.values())
            self._other_numbers = [n for n in _PHONE_NUMBER.findall(observation) if n not in known]
        elif call.name == "auth_info_form":
            self._auth.update(_FORM_LINE.findall(observation))
            self._wanted = [key for key in self._wanted if key not in self._auth]
        elif call.name == "make_phone_call" and call.arguments.get("phone_number") == self._top_number():
            # only the department it means to reach moves the plan (a mistaken call's reply is ignored)
            self._digest_reply(observation, response_type)

    def _digest_reply(self, reply: str, response_type: str) -> None:
        called = self._stack[-1]
        named = [d for d in self._directory if d != called and d in reply]
        if response_type == "auth_request":
            asked = [key for key, phrase in self._fields.items() if phrase in reply]
            self._wanted = [key for key in asked if key not in self._auth]
        elif response_type == "prerequisite_required" and named:
            self._stack.append(named[0])
        elif response_type == "routing" and named:
            self._stack[-1] = named[0]
        elif response_type == "service_provided":
            self._stack.pop()
            if not self._stack and named:
                self._stack.append(named[0])
        elif response_type == "wrong_department":
            self._stack[-1] = ROUTER_DEPARTMENT
        if not self._stack:
            self._stack.append(ROUTER_DEPARTMENT)


def _read_directory(listing: str, company: str) -> dict[str, str]:
    """Department -> phone number for ``company``'s entry in a search result (empty if it is not listed)."""
    directory: dict[str, str] = {}
    inside = False
    for line in listing.splitlines():
        if line.startswith("["):
            inside = line.split("] ", 1)[-1].startswith(f"{company} (")
        elif inside:
            match = _DIRECTORY_LINE.match(line)
            if match:
                directory[match.group(1)] = match.group(2)
    return directory


class RandomPolicy:
    """Random baseline over the entities it has seen: uniformly one of the three tools each turn.

    ``search_company`` gets the prompt's company; ``auth_info_form`` 1-3 random field names;
    ``make_phone_call`` a random phone number seen so far (or a made-up one) with a random subset of the
    values read so far.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self._fields: list[str] = []
        self._company = ""
        self._numbers: list[str] = []
        self._auth: dict[str, str] = {}

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Forget the previous episode; read the company and the field vocabulary."""
        self._fields = list(_field_phrases(info))
        self._company = dict(_PROMPT_FIELD.findall(observation)).get("Company", "")
        self._numbers, self._auth = [], {}

    def act(self, observation: str, info: dict[str, Any]) -> ToolCall:
        """A uniformly random tool with arguments drawn from what has been observed."""
        for number in _PHONE_NUMBER.findall(observation):
            if number not in self._numbers:
                self._numbers.append(number)
        self._auth.update(_FORM_LINE.findall(observation))
        tool = int(self.rng.integers(3))
        if tool == 0:
            return ToolCall("search_company", {"company": self._company})
        if tool == 1:
            picks = self.rng.permutation(len(self._fields))[: int(self.rng.integers(1, 4))]
            return ToolCall("auth_info_form", {"fields": [self._fields[i] for i in picks]})
        number = (self._numbers[int(self.rng.integers(len(self._numbers)))] if self._numbers
                  else f"1-800-{int(self.rng.integers(200, 1000))}-{int(self.rng.integers(10000)):04d}")
        auth = {key: value for key, value in self._auth.items() if self.rng.random() < 0.5}
        return ToolCall("make_phone_call", {"phone_number": number, "auth_info": auth})


class TextPolicy:
    """Adapts a :class:`CSRPolicy` to an env wrapped in ``ParseToolCall``: calls become Hermes text."""

    def __init__(self, policy: CSRPolicy) -> None:
        self.policy = policy

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Forward to the wrapped policy."""
        self.policy.reset(observation, info)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The wrapped policy's call as ``<tool_call>{json}</tool_call>`` text."""
        return format_tool_call(self.policy.act(observation, info))
