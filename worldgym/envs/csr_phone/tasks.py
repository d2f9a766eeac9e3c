"""Tasks: a customer's goal at a company (e.g. "dispute a charge on your phone bill"), difficulty 1-5."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgym.envs.csr_phone.profiles import CustomerProfile
from worldgym.envs.csr_phone.world import DIFFICULTIES, Company, Split, World

__all__ = ["Task", "count_tasks", "sample_task", "task_prompt"]


@dataclass(frozen=True)
class Task:
    """One episode's task: help ``profile`` reach ``goal`` with ``company``'s ``department``.

    ``chain`` lists the prerequisite departments, nearest first; they must be visited deepest first.
    """

    company: Company
    department: str
    goal: str
    difficulty: int
    chain: tuple[str, ...]
    reasons: tuple[int, ...]  # per chain step: index into phrases.PREREQUISITE_REASONS
    profile: CustomerProfile

    @property
    def names_department(self) -> bool:
        """Whether the prompt tells the agent which department handles the task."""
        return DIFFICULTIES[self.difficulty].names_department


def sample_task(world: World, split: Split, difficulty: int, profile: CustomerProfile,
                rng: np.random.Generator) -> Task:
    """A uniformly drawn company of ``split`` and tier ``difficulty``, then a task department and goal."""
    company_pick, department_pick, goal_pick, reason_pick = rng.integers(0, 1 << 62, size=4).tolist()
    companies = world.by_split_tier[(split, difficulty)]
    company = companies[company_pick % len(companies)]
    departments = world.task_departments[company.name]
    department = departments[department_pick % len(departments)]
    goals = company.industry.services[department]
    chain = company.chain(department)
    reasons = tuple(reason_pick >> (8 * i) & 0xFF for i in range(len(chain)))
    return Task(company, department, goals[goal_pick % len(goals)], difficulty, chain, reasons, profile)


def count_tasks(world: World, split: Split, difficulty: int) -> int:
    """How many distinct (company, department, goal) tasks ``split`` holds at ``difficulty``."""
    return sum(len(c.industry.services[d]) for c in world.by_split_tier[(split, difficulty)]
               for d in world.task_departments[c.name])


def task_prompt(task: Task, max_turns: int) -> str:
    """The text an agent sees on reset."""
    lines = [
        "You are a phone assistant calling companies on behalf of a customer.",
        f"Customer: {task.profile.name}",
        f"Company: {task.company.name}",
        f"Goal: {task.goal}",
    ]
    if task.names_department:
        lines.append(f"Department: {task.department}")
    lines.append(
        "Find the company's phone numbers with search_company, look up the customer's details with "
        "auth_info_form when a representative asks for them, and call with make_phone_call. "
        f"The task ends when a representative completes the goal; you have at most {max_turns} tool calls."
    )
    return "\n".join(lines)
