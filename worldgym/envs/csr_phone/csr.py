"""The customer-service representative (CSR) simulator: decides how a call is answered, then phrases it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldgym.envs.csr_phone import phrases
from worldgym.envs.csr_phone.profiles import FIELD_PHRASES
from worldgym.envs.csr_phone.tasks import Task
from worldgym.envs.csr_phone.world import ROUTER_DEPARTMENT, Company, Department, World, phone_digits

__all__ = ["CSRSimulator", "CallOutcome"]


@dataclass(frozen=True)
class CallOutcome:
    """How a call went: the response type, the spoken reply and what changed in the episode."""

    response_type: str
    text: str
    company: str | None = None
    department: str | None = None
    task_complete: bool = False
    completed_prerequisite: str | None = None  # set when this call first finished a prerequisite step


@dataclass
class CSRSimulator:
    """Answers calls for one episode's ``task``; remembers the prerequisite steps the customer completed.

    Decision order for a call to a department ``D`` of the task's company, where the task's path is
    ``(task department, nearest prerequisite, ..., deepest prerequisite)``:

    1. ``D`` on the path and the next deeper step not yet done -> ``prerequisite_required`` (naming it);
    2. ``D`` on the path -> authentication (``auth_failed`` on any wrong value, else ``auth_request``
       naming the missing fields), then ``task_complete`` for the task department or ``service_provided``
       for a prerequisite step (naming the department to call next);
    3. ``D`` is the router (Customer Service) -> ``routing`` to the task department with its number;
    4. otherwise -> ``wrong_department``.

    Another company's departments ask for their own fields and then find no account (``auth_failed``); a
    number nobody owns gets the ``invalid_number`` recording.
    """

    world: World
    task: Task
    completed: set[str] = field(default_factory=set)

    @property
    def path(self) -> tuple[str, ...]:
        """The task department followed by its prerequisite chain (nearest first)."""
        return (self.task.department,) + self.task.chain

    def call(self, phone_number: str, auth_info: Mapping[str, Any], rng: np.random.Generator) -> CallOutcome:
        """Answer a call to ``phone_number`` offering ``auth_info``; paraphrases are drawn from ``rng``."""
        owner = self.world.by_phone.get(phone_digits(phone_number))
        if owner is None:
            return CallOutcome(phrases.INVALID_NUMBER, self._say(rng, phrases.INVALID_NUMBER, None, None))
        company, department = owner
        if company is not self.task.company:
            return self._foreign_company(company, department, auth_info, rng)
        path = self.path
        if department.name in path:
            return self._on_path(company, department, path.index(department.name), auth_info, rng)
        if department.name == ROUTER_DEPARTMENT:
            target = company.by_name[self.task.department]
            text = self._say(rng, phrases.ROUTING, company, department, target=target.name,
                             number=target.phone_number)
            return CallOutcome(phrases.ROUTING, text, company.name, department.name)
        text = self._say(rng, phrases.WRONG_DEPARTMENT, company, department, router=ROUTER_DEPARTMENT)
        return CallOutcome(phrases.WRONG_DEPARTMENT, text, company.name, department.name)

    def _on_path(self, company: Company, department: Department, index: int, auth_info: Mapping[str, Any],
                 rng: np.random.Generator) -> CallOutcome:
        path, reasons = self.path, self.task.reasons
        if index + 1 < len(path) and path[index + 1] not in self.completed:
            reason = phrases.PREREQUISITE_REASONS[reasons[index] % len(phrases.PREREQUISITE_REASONS)][0]
            text = self._say(rng, phrases.PREREQUISITE_REQUIRED, company, department,
                             prerequisite=path[index + 1], reason=reason)
            return CallOutcome(phrases.PREREQUISITE_REQUIRED, text, company.name, department.name)
        refusal = self._authenticate(company, department, auth_info, rng)
        if refusal is not None:
            return refusal
        if index == 0:
            text = self._say(rng, phrases.TASK_COMPLETE, company, department, goal=self.task.goal)
            return CallOutcome(phrases.TASK_COMPLETE, text, company.name, department.name, task_complete=True)
        newly = department.name not in self.completed
        self.completed.add(department.name)
        reason = phrases.PREREQUISITE_REASONS[reasons[index - 1] % len(phrases.PREREQUISITE_REASONS)][1]
        text = self._say(rng, phrases.SERVICE_PROVIDED, company, department, reason=reason,
                         next=path[index - 1])
        return CallOutcome(phrases.SERVICE_PROVIDED, text, company.name, department.name,
                           completed_prerequisite=department.name if newly else None)

    def _authenticate(self, company: Company, department: Department, auth_info: Mapping[str, Any],
                      rng: np.random.Generator) -> CallOutcome | None:
        """``None`` when ``auth_info`` has the customer's correct value of each field the department needs."""
        profile = self.task.profile
        missing = []
        for field_name in department.auth_fields:
            given = auth_info.get(field_name)
            if given is None or (isinstance(given, str) and not given.strip()):
                missing.append(field_name)
            elif not profile.matches(field_name, given):
                text = self._say(rng, phrases.AUTH_FAILED, company, department)
                return CallOutcome(phrases.AUTH_FAILED, text, company.name, department.name)
        if not missing:
            return None
        return self._ask_for(company, department, missing, rng)

    def _foreign_company(self, company: Company, department: Department, auth_info: Mapping[str, Any],
                         rng: np.random.Generator) -> CallOutcome:
        """A company the customer has no account with: it asks for its fields, then finds no match."""
        missing = [f for f in department.auth_fields if not auth_info.get(f)]
        if missing:
            return self._ask_for(company, department, missing, rng)
        text = self._say(rng, phrases.AUTH_FAILED, company, department)
        return CallOutcome(phrases.AUTH_FAILED, text, company.name, department.name)

    def _ask_for(self, company: Company, department: Department, missing: list[str],
                 rng: np.random.Generator) -> CallOutcome:
        spoken = phrases.join_phrases([FIELD_PHRASES[f] for f in missing])
        text = self._say(rng, phrases.AUTH_REQUEST, company, department, fields=spoken)
        return CallOutcome(phrases.AUTH_REQUEST, text, company.name, department.name)

    @staticmethod
    def _say(rng: np.random.Generator, response_type: str, company: Company | None,
             department: Department | None, **slots: str) -> str:
        return phrases.render_reply(rng, response_type, company.name if company else "",
                                    department.name if department else "", **slots)
