"""Seeded procedural world: companies in several industries with departments, numbers, auth, prerequisites.

A :class:`World` is generated once from ``world_seed`` (and cached). Each company belongs to one split
(train / validation / test) and one difficulty tier; the tier fixes how many departments it has, how many
authentication fields each department asks for, how long its prerequisite chain is and how many name-alike
companies (distractors) share its search results. Name-alike companies form clusters that live in the same
split, so unseen test companies stay unseen together with their distractors.
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np

__all__ = [
    "DIFFICULTIES",
    "INDUSTRIES",
    "ROUTER_DEPARTMENT",
    "SPLITS",
    "Company",
    "Department",
    "DifficultySpec",
    "Industry",
    "Split",
    "World",
    "generate_world",
    "get_world",
    "normalize_name",
    "phone_digits",
    "task_departments",
]

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")
# Companies per (industry, tier, split); with 6 industries and 5 tiers: 180 / 60 / 60 cluster seeds.
_COMPANIES_PER_SPLIT: dict[Split, int] = {"train": 6, "validation": 2, "test": 2}

# Every company has this department; it answers general calls and routes callers to the right department.
ROUTER_DEPARTMENT = "Customer Service"


@dataclass(frozen=True)
class DifficultySpec:
    """What a difficulty level means for the companies of that tier."""

    level: int
    departments: tuple[int, int]  # inclusive range of departments per company
    chain_length: int  # prerequisite departments to visit before the task's department
    auth_fields: tuple[int, int]  # inclusive range of auth fields per department
    name_alikes: int  # distractor companies with similar names returned by the same search
    names_department: bool  # whether the task prompt names the department that handles the task


DIFFICULTIES: dict[int, DifficultySpec] = {
    1: DifficultySpec(1, (2, 3), 0, (1, 1), 0, True),
    2: DifficultySpec(2, (3, 4), 0, (2, 2), 0, True),
    3: DifficultySpec(3, (4, 5), 1, (2, 3), 1, False),
    4: DifficultySpec(4, (5, 6), 1, (3, 3), 2, False),
    5: DifficultySpec(5, (6, 8), 2, (3, 4), 3, False),
}


@dataclass(frozen=True)
class Industry:
    """An industry: company-name suffixes, its departments (with the goals they serve) and its auth fields."""

    name: str
    suffixes: tuple[str, ...]
    alike_suffixes: tuple[str, ...]
    services: dict[str, tuple[str, ...]]  # department -> goals it serves (ROUTER_DEPARTMENT included)
    auth_fields: tuple[str, ...]


INDUSTRIES: tuple[Industry, ...] = (
    Industry("banking", ("Bank", "Savings Bank", "Bank & Trust"), ("Bancorp", "Banking Co", "Bank Group"), {
        ROUTER_DEPARTMENT: ("update your mailing address", "order a new checkbook"),
        "Fraud": ("report a fraudulent charge", "dispute a charge on your debit card"),
        "Card Services": ("raise your credit limit", "replace a damaged credit card"),
        "Loans": ("get your loan payoff amount", "defer a loan payment"),
        "Online Banking": ("reset your online banking password", "unlock your online account"),
        "Wire Transfers": ("send an international wire", "cancel a pending wire transfer"),
        "Mortgages": ("request a mortgage escrow analysis", "ask for a mortgage rate review"),
        "Deposit Accounts": ("check your savings balance", "close a savings account"),
    }, ("account_number", "last_4_ssn", "last_4_cc", "full_name", "date_of_birth", "zip_code", "pin",
        "mothers_maiden_name")),
    Industry("telecom", ("Wireless", "Telecom", "Mobile"), ("Telecommunications", "Wireless Group",
                                                             "Mobility"), {
        ROUTER_DEPARTMENT: ("change your monthly plan", "update your contact email"),
        "Billing": ("dispute a charge on your phone bill", "set up automatic payments"),
        "Technical Support": ("fix dropped calls at home", "reset your voicemail password"),
        "Device Upgrades": ("upgrade your phone", "return a defective handset"),
        "International Roaming": ("add an international roaming pass", "remove roaming charges"),
        "Number Porting": ("transfer your number to a new line", "get your number transfer PIN"),
        "Retention": ("cancel your service", "ask about a loyalty discount"),
        "Fraud": ("report a SIM swap you did not make", "block unauthorized purchases"),
    }, ("account_number", "phone_on_file", "pin", "full_name", "last_4_ssn", "zip_code", "email")),
    Industry("airline", ("Airlines", "Air", "Airways"), ("Air Lines", "Aviation", "Air Group"), {
        ROUTER_DEPARTMENT: ("update the email on your booking", "ask about your trip itinerary"),
        "Reservations": ("change your flight date", "upgrade your seat to business class"),
        "Baggage": ("report a lost suitcase", "claim compensation for a damaged bag"),
        "Refunds": ("get a refund for a cancelled flight", "request a travel credit"),
        "Loyalty Program": ("add missing miles to your account", "reinstate expired miles"),
        "Special Assistance": ("request wheelchair assistance", "arrange travel with a service animal"),
        "Group Travel": ("add a traveler to a group booking", "change a group booking date"),
        "Cargo": ("track a cargo shipment", "file a cargo damage claim"),
    }, ("booking_reference", "full_name", "frequent_flyer_number", "date_of_birth", "email", "last_4_cc",
        "phone_on_file")),
    Industry("insurance", ("Insurance", "Mutual", "Assurance"), ("Insurance Group", "Mutual Co",
                                                                 "Assurance Co"), {
        ROUTER_DEPARTMENT: ("update your beneficiary", "request a copy of your policy"),
        "Claims": ("file a claim for a car accident", "check the status of a claim"),
        "Premium Billing": ("change your premium payment date", "dispute a premium charge"),
        "Policy Changes": ("add a driver to your policy", "raise your coverage limit"),
        "Special Investigations": ("report suspected insurance fraud", "report a stolen policy number"),
        "Roadside Assistance": ("request a tow", "get a refund for a locksmith visit"),
        "Underwriting": ("review your risk rating", "submit a home inspection report"),
        "Subrogation": ("recover your deductible", "respond to a subrogation letter"),
    }, ("policy_number", "member_id", "full_name", "date_of_birth", "zip_code", "last_4_ssn", "email")),
    Industry("utility", ("Energy", "Power", "Electric"), ("Power & Light", "Energy Co", "Electric Co"), {
        ROUTER_DEPARTMENT: ("update your phone number", "ask about your usage history"),
        "Billing": ("set up a payment plan", "dispute an estimated bill"),
        "Outages": ("report a power outage", "report a downed power line"),
        "Start and Stop": ("start service at a new address", "stop service before moving"),
        "Meter Services": ("request a meter re-read", "schedule a smart meter install"),
        "Energy Efficiency": ("apply for a home energy rebate", "book a home energy audit"),
        "Collections": ("restore a disconnected service", "avoid a scheduled disconnection"),
        "Solar Programs": ("connect rooftop solar panels", "check your net metering credits"),
    }, ("account_number", "service_address", "meter_number", "full_name", "phone_on_file", "zip_code",
        "last_4_ssn")),
    Industry("healthcare", ("Health", "Health Plan", "Healthcare"), ("Health Group", "Health Systems",
                                                                      "Health Partners"), {
        ROUTER_DEPARTMENT: ("order a replacement member card", "update your home address"),
        "Claims": ("resubmit a rejected claim", "check why a claim is pending"),
        "Pharmacy": ("refill a prescription by mail", "ask about a drug's copay"),
        "Prior Authorization": ("get approval for an MRI", "extend a physical therapy approval"),
        "Appeals": ("appeal a denied claim", "check the status of an appeal"),
        "Provider Network": ("find an in-network dermatologist", "change your primary care doctor"),
        "Premium Billing": ("set up premium autopay", "dispute a late premium fee"),
        "Care Management": ("enroll in a diabetes program", "schedule a nurse care call"),
    }, ("member_id", "full_name", "date_of_birth", "zip_code", "last_4_ssn", "email", "phone_on_file")),
)

_BRAND_HEADS = ("Nor", "Ash", "Bel", "Cor", "Dal", "Ever", "Fal", "Gran", "Hal", "Iver", "Kes", "Lum",
                "Mar", "Nov", "Or", "Pel", "Quin", "Ros", "Sil", "Tor", "Val", "Wes", "Zen", "Bright",
                "Clear", "Stone")
_BRAND_TAILS = ("thwind", "ford", "mont", "ridge", "vale", "haven", "crest", "brook", "field", "wick",
                "stead", "gate", "wood", "port", "more", "line", "ton", "hurst", "bury", "leigh", "view",
                "stone")
_VOWELS = "aeiouy"
_TOLL_FREE = ("800", "888", "877", "866", "855", "844", "833")


@dataclass(frozen=True)
class Department:
    """A department: its phone number, the auth fields its CSR asks for, the department it requires first."""

    name: str
    phone_number: str
    auth_fields: tuple[str, ...]
    prerequisite: str | None  # a department the customer must have been helped by before this one helps


@dataclass(frozen=True)
class Company:
    """A company in the world. ``departments`` are in the order the phone book lists them."""

    name: str
    industry: Industry
    tier: int
    split: Split
    departments: tuple[Department, ...]
    cluster: tuple[str, ...] = ()  # names of the name-alike companies (itself included), in search order
    by_name: dict[str, Department] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.by_name.update({department.name: department for department in self.departments})

    def chain(self, department: str) -> tuple[str, ...]:
        """The prerequisite chain of ``department``: the department it requires first, then that one's, ..."""
        chain: list[str] = []
        prerequisite = self.by_name[department].prerequisite
        while prerequisite is not None:
            chain.append(prerequisite)
            prerequisite = self.by_name[prerequisite].prerequisite
        return tuple(chain)

    def directory_text(self) -> str:
        """This company's phone-book entry as text."""
        lines = [f"{self.name} ({self.industry.name})"]
        lines += [f"    {department.name}: {department.phone_number}" for department in self.departments]
        return "\n".join(lines)


@dataclass
class World:
    """All companies, indexed by normalized name, by phone number and by (split, tier)."""

    seed: int
    companies: dict[str, Company]  # normalized name -> company
    by_phone: dict[str, tuple[Company, Department]]  # digits-only number -> owner
    by_split_tier: dict[tuple[str, int], tuple[Company, ...]]
    task_departments: dict[str, tuple[str, ...]] = field(default_factory=dict)  # company name -> see function
    _bigrams: dict[str, list[str]] = field(default_factory=dict, repr=False)  # bigram -> normalized names

    def __post_init__(self) -> None:
        self.task_departments.update({c.name: task_departments(c) for c in self.companies.values()})
        for key in self.companies:
            for bigram in _bigrams(key):
                self._bigrams.setdefault(bigram, []).append(key)

    def search(self, query: str, max_close: int = 4,
               cutoff: float = 0.75) -> tuple[bool, tuple[Company, ...]]:
        """Companies matching ``query``: ``(True, exact match + name-alikes)`` or ``(False, close names)``.

        Close names have a ``difflib`` similarity ratio >= ``cutoff``; a bigram index first keeps only names
        sharing at least half of the query's letter pairs, so a miss costs microseconds, not a full scan.
        """
        key = normalize_name(query)
        exact = self.companies.get(key)
        if exact is not None:
            return True, tuple(self.companies[normalize_name(name)] for name in exact.cluster)
        query_bigrams = _bigrams(key)
        shared: dict[str, int] = {}
        for bigram in query_bigrams:
            for name in self._bigrams.get(bigram, ()):
                shared[name] = shared.get(name, 0) + 1
        candidates = [name for name, count in shared.items() if 2 * count >= len(query_bigrams)]
        close = difflib.get_close_matches(key, candidates, n=max_close, cutoff=cutoff)
        return False, tuple(self.companies[name] for name in close)


def _bigrams(text: str) -> set[str]:
    return {text[i:i + 2] for i in range(len(text) - 1)}


_NON_ALNUM = re.compile(r"(?:[^\w&]|_)+")  # letters and digits of any script are kept
_NON_DIGIT = re.compile(r"[^0-9]+")


def normalize_name(name: str) -> str:
    """A company name case-folded with runs of characters other than letters, digits and ``&`` collapsed to one
    space (letters of any script count: "Crème Brûlée" and "Creme Brulee" are different names).

    >>> normalize_name("  Norford   Bank & Trust!"), normalize_name("Zürich_Straße")
    ('norford bank & trust', 'zürich strasse')
    """
    return _NON_ALNUM.sub(" ", name.casefold()).strip()


def phone_digits(number: str) -> str:
    """The digits of a phone number; a leading 1 is added to 10-digit numbers.

    >>> phone_digits("(800) 555-0142"), phone_digits("1-800-555-0142")
    ('18005550142', '18005550142')
    """
    digits = _NON_DIGIT.sub("", number)
    return "1" + digits if len(digits) == 10 else digits


@lru_cache(maxsize=8)
def get_world(world_seed: int) -> World:
    """The world for ``world_seed`` (generated once per process, then cached; worlds are never mutated)."""
    return generate_world(world_seed)


def generate_world(world_seed: int) -> World:
    """Generate every company of every industry, tier and split from ``world_seed``."""
    rng = np.random.default_rng(world_seed)
    brands = _unique_brands(rng)
    phone_numbers = _phone_numbers(rng)
    companies: dict[str, Company] = {}
    by_split_tier: dict[tuple[str, int], list[Company]] = {}
    for industry in INDUSTRIES:
        for tier, spec in DIFFICULTIES.items():
            for split in SPLITS:
                for _ in range(_COMPANIES_PER_SPLIT[split]):
                    names = _cluster_names(next(brands), industry, spec.name_alikes, rng, companies)
                    order = [names[i] for i in rng.permutation(len(names))]
                    for name in names:
                        company = _make_company(name, industry, spec, split, tuple(order), rng, phone_numbers)
                        companies[normalize_name(name)] = company
                        by_split_tier.setdefault((split, tier), []).append(company)
    by_phone = {phone_digits(d.phone_number): (c, d) for c in companies.values() for d in c.departments}
    return World(world_seed, companies, by_phone, {key: tuple(value) for key, value in by_split_tier.items()})


def _unique_brands(rng: np.random.Generator):
    """Endless distinct brand names (head + tail), in a seeded order."""
    pairs = [head + tail for head in _BRAND_HEADS for tail in _BRAND_TAILS]
    for index in rng.permutation(len(pairs)):
        yield pairs[index]
    raise RuntimeError("ran out of brand names; add heads/tails in world.py")


def _phone_numbers(rng: np.random.Generator):
    """Endless distinct toll-free numbers like ``1-800-555-0142``."""
    seen: set[str] = set()
    while True:
        prefix = _TOLL_FREE[int(rng.integers(len(_TOLL_FREE)))]
        middle, last = int(rng.integers(200, 1000)), int(rng.integers(0, 10000))
        number = f"1-{prefix}-{middle:03d}-{last:04d}"
        if number not in seen:
            seen.add(number)
            yield number


def _cluster_names(brand: str, industry: Industry, alikes: int, rng: np.random.Generator,
                   taken: dict[str, Company]) -> list[str]:
    """``brand`` + a suffix, plus ``alikes`` distinct similar names (other suffix, or one letter changed)."""
    suffix = industry.suffixes[int(rng.integers(len(industry.suffixes)))]
    names = [f"{brand} {suffix}"]
    variants = [f"{brand} {alike}" for alike in industry.alike_suffixes]
    variants += [f"{_misspell(brand, rng)} {suffix}" for _ in range(4)]
    for variant in (variants[i] for i in rng.permutation(len(variants))):
        if len(names) == 1 + alikes:
            break
        if variant not in names and normalize_name(variant) not in taken:
            names.append(variant)
    return names


def _misspell(brand: str, rng: np.random.Generator) -> str:
    """``brand`` with one vowel swapped for another (e.g. Northwind -> Northwynd)."""
    positions = [i for i, ch in enumerate(brand) if ch in _VOWELS and i > 0]
    i = positions[int(rng.integers(len(positions)))]
    replacement = [v for v in _VOWELS if v != brand[i]][int(rng.integers(len(_VOWELS) - 1))]
    return brand[:i] + replacement + brand[i + 1:]


def _make_company(name: str, industry: Industry, spec: DifficultySpec, split: Split, cluster: tuple[str, ...],
                  rng: np.random.Generator, phone_numbers) -> Company:
    """A company of tier ``spec``: departments, auth fields, one prerequisite chain of ``spec.chain_length``.

    The chain is ``B1 <- B2 <- ... <- BL`` (``B1`` requires ``B2`` first, ...); every other department except
    the router then requires ``B1``, so each of them is a task department with ``chain_length`` prerequisites.
    """
    others = [d for d in industry.services if d != ROUTER_DEPARTMENT]
    count = int(rng.integers(spec.departments[0], spec.departments[1] + 1))
    chosen = [ROUTER_DEPARTMENT] + [others[i] for i in rng.permutation(len(others))[: count - 1]]
    chain: list[str] = []
    if spec.chain_length:
        pool = list(chosen) if rng.random() < 0.5 else chosen[1:]
        chain = [pool[i] for i in rng.permutation(len(pool))[: spec.chain_length]]
    prerequisites = {department: None for department in chosen}
    for upper, lower in itertools.pairwise(chain):
        prerequisites[upper] = lower
    if chain:
        for department in chosen:
            if department != ROUTER_DEPARTMENT and department not in chain:
                prerequisites[department] = chain[0]
    departments = []
    for department in (chosen[i] for i in rng.permutation(len(chosen))):
        size = int(rng.integers(spec.auth_fields[0], spec.auth_fields[1] + 1))
        picks = sorted(rng.permutation(len(industry.auth_fields))[:size])
        fields = tuple(industry.auth_fields[i] for i in picks)
        departments.append(Department(department, next(phone_numbers), fields, prerequisites[department]))
    return Company(name, industry, spec.level, split, tuple(departments), cluster)


def task_departments(company: Company) -> tuple[str, ...]:
    """Departments whose prerequisite chain has exactly the tier's length: the ones tasks are drawn from."""
    length = DIFFICULTIES[company.tier].chain_length
    return tuple(d.name for d in company.departments if len(company.chain(d.name)) == length
                 and (length == 0 or d.name != ROUTER_DEPARTMENT))

