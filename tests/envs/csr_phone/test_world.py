"""World generator: splits, tiers, phone book and search."""

import itertools

import numpy as np
import pytest

from worldgym.envs.csr_phone.profiles import FIELD_PHRASES, generate_profile
from worldgym.envs.csr_phone.world import (
    DIFFICULTIES,
    INDUSTRIES,
    ROUTER_DEPARTMENT,
    SPLITS,
    generate_world,
    get_world,
    normalize_name,
    phone_digits,
    task_departments,
)


@pytest.fixture(scope="module")
def world():
    return get_world(0)


def test_same_seed_same_world_and_different_seed_different_world(world):
    again = generate_world(0)
    assert [c.directory_text() for c in again.companies.values()] == [
        c.directory_text() for c in world.companies.values()]
    other = generate_world(1)
    assert set(other.companies) != set(world.companies)


def test_splits_are_disjoint_and_name_alike_clusters_stay_in_one_split(world):
    by_split = {split: {c.name for c in world.companies.values() if c.split == split} for split in SPLITS}
    for a, b in itertools.combinations(SPLITS, 2):
        assert not by_split[a] & by_split[b]
    for company in world.companies.values():
        assert all(world.companies[normalize_name(n)].split == company.split for n in company.cluster)
    assert {c.industry.name for c in world.companies.values()} == {i.name for i in INDUSTRIES}
    assert len(INDUSTRIES) >= 5


def test_every_split_and_tier_has_companies_with_tasks(world):
    for split, tier in itertools.product(SPLITS, DIFFICULTIES):
        companies = world.by_split_tier[(split, tier)]
        assert companies and all(task_departments(c) for c in companies)


def test_companies_follow_their_tier_spec(world):
    for company in world.companies.values():
        spec = DIFFICULTIES[company.tier]
        low, high = spec.departments
        assert low <= len(company.departments) <= high
        assert ROUTER_DEPARTMENT in company.by_name
        low, high = spec.auth_fields
        assert all(low <= len(d.auth_fields) <= high for d in company.departments)
        assert all(f in FIELD_PHRASES for d in company.departments for f in d.auth_fields)
        assert max(len(company.chain(d.name)) for d in company.departments) == spec.chain_length
        assert len(company.cluster) == 1 + spec.name_alikes and company.name in company.cluster


def test_phone_numbers_are_unique_and_indexed(world):
    numbers = [d.phone_number for c in world.companies.values() for d in c.departments]
    assert len(numbers) == len(set(numbers)) == len(world.by_phone)
    assert phone_digits("(800) 555-0142") == phone_digits("1-800-555-0142") == "18005550142"


def test_spoken_names_are_unambiguous():
    phrases = list(FIELD_PHRASES.values())
    assert not [(a, b) for a in phrases for b in phrases if a != b and a in b]
    for industry in INDUSTRIES:
        names = list(industry.services)
        assert not [(a, b) for a in names for b in names if a != b and a in b], industry.name
        assert set(industry.auth_fields) <= set(FIELD_PHRASES)


def test_search_exact_fuzzy_and_unknown(world):
    company = world.by_split_tier[("train", 5)][0]
    exact, found = world.search(company.name.upper() + "  ")
    assert exact and company in found and len(found) == 1 + DIFFICULTIES[5].name_alikes
    assert {c.name for c in found} == set(company.cluster)
    typo = company.name[:-1] + ("x" if company.name[-1] != "x" else "y")
    exact, close = world.search(typo)
    assert not exact and company.name in [c.name for c in close]
    assert world.search("zzqq unknown corp") == (False, ())
    assert world.search("") == (False, ())


def test_profiles_are_seeded_and_complete():
    a, b = generate_profile(np.random.default_rng(3)), generate_profile(np.random.default_rng(3))
    assert a == b and set(a.values) == set(FIELD_PHRASES)
    assert a.matches("date_of_birth", a.values["date_of_birth"].replace("-", " "))
    assert not a.matches("pin", "not-it") and not a.matches("pin", 1234)
