"""CSR simulator: every response type, decided by the rules in ``CSRSimulator``'s docstring."""

import numpy as np
import pytest

from worldgym.envs.csr_phone import phrases
from worldgym.envs.csr_phone.csr import CSRSimulator
from worldgym.envs.csr_phone.profiles import FIELD_PHRASES, generate_profile
from worldgym.envs.csr_phone.tasks import sample_task
from worldgym.envs.csr_phone.world import ROUTER_DEPARTMENT, get_world, normalize_name


def make_csr(difficulty: int, seed: int = 0) -> CSRSimulator:
    rng = np.random.default_rng(seed)
    task = sample_task(get_world(0), "train", difficulty, generate_profile(rng), rng)
    return CSRSimulator(get_world(0), task)


def full_auth(csr: CSRSimulator) -> dict[str, str]:
    return dict(csr.task.profile.values)


def number(csr: CSRSimulator, department: str) -> str:
    return csr.task.company.by_name[department].phone_number


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_invalid_number(rng):
    outcome = make_csr(1).call("1-999-000-0000", {}, rng)
    assert outcome.response_type == phrases.INVALID_NUMBER
    assert outcome.text in phrases.PARAPHRASES[phrases.INVALID_NUMBER]


def test_missing_and_partial_auth_names_exactly_the_missing_fields(rng):
    csr = make_csr(4)
    department = csr.task.company.by_name[csr.path[-1]]  # deepest prerequisite: no prerequisite of its own
    given = {department.auth_fields[0]: csr.task.profile.values[department.auth_fields[0]]}
    outcome = csr.call(department.phone_number, given, rng)
    assert outcome.response_type == phrases.AUTH_REQUEST
    named = {f for f, phrase in FIELD_PHRASES.items() if phrase in outcome.text}
    assert named == set(department.auth_fields[1:])


def test_wrong_auth_value_fails(rng):
    csr = make_csr(2)
    auth = full_auth(csr)
    auth[csr.task.company.by_name[csr.task.department].auth_fields[0]] = "0000-wrong"
    outcome = csr.call(number(csr, csr.task.department), auth, rng)
    assert outcome.response_type == phrases.AUTH_FAILED and not outcome.task_complete


def test_prerequisite_chain_then_service_then_completion(rng):
    csr = make_csr(5, seed=1)
    path, auth = csr.path, full_auth(csr)
    assert len(path) == 3
    outcome = csr.call(number(csr, path[0]), auth, rng)
    assert outcome.response_type == phrases.PREREQUISITE_REQUIRED and path[1] in outcome.text
    outcome = csr.call(number(csr, path[1]), auth, rng)
    assert outcome.response_type == phrases.PREREQUISITE_REQUIRED and path[2] in outcome.text
    outcome = csr.call(number(csr, path[2]), auth, rng)
    assert outcome.response_type == phrases.SERVICE_PROVIDED and path[1] in outcome.text
    assert outcome.completed_prerequisite == path[2]
    again = csr.call(number(csr, path[2]), auth, rng)
    assert again.response_type == phrases.SERVICE_PROVIDED and again.completed_prerequisite is None
    assert csr.call(number(csr, path[1]), auth, rng).response_type == phrases.SERVICE_PROVIDED
    outcome = csr.call(number(csr, path[0]), auth, rng)
    assert outcome.response_type == phrases.TASK_COMPLETE and outcome.task_complete


def test_router_routes_and_other_departments_redirect(rng):
    for seed in range(50):
        csr = make_csr(3, seed)
        if ROUTER_DEPARTMENT not in csr.path:
            break
    outcome = csr.call(number(csr, ROUTER_DEPARTMENT), {}, rng)
    assert outcome.response_type == phrases.ROUTING
    assert csr.task.department in outcome.text and number(csr, csr.task.department) in outcome.text
    off_path = [d.name for d in csr.task.company.departments if d.name not in csr.path + (ROUTER_DEPARTMENT,)]
    outcome = csr.call(number(csr, off_path[0]), full_auth(csr), rng)
    assert outcome.response_type == phrases.WRONG_DEPARTMENT and ROUTER_DEPARTMENT in outcome.text


def test_name_alike_company_has_no_account(rng):
    csr = make_csr(4)
    alike = next(n for n in csr.task.company.cluster if n != csr.task.company.name)
    department = get_world(0).companies[normalize_name(alike)].departments[0]
    assert csr.call(department.phone_number, {}, rng).response_type == phrases.AUTH_REQUEST
    assert csr.call(department.phone_number, full_auth(csr), rng).response_type == phrases.AUTH_FAILED


def test_phone_number_formats_are_normalized(rng):
    csr = make_csr(1)
    digits = "".join(ch for ch in number(csr, csr.task.department) if ch.isdigit())
    spaced = f"({digits[1:4]}) {digits[4:7]} {digits[7:]}"
    assert csr.call(spaced, {}, rng).response_type != phrases.INVALID_NUMBER


def test_replies_are_paraphrased_from_the_rng():
    csr = make_csr(1)
    phone = number(csr, csr.task.department)
    texts = {csr.call(phone, {}, np.random.default_rng(seed)).text for seed in range(40)}
    assert len(texts) >= 10
    same = [csr.call(number(csr, csr.task.department), {}, np.random.default_rng(7)).text for _ in range(2)]
    assert same[0] == same[1]
