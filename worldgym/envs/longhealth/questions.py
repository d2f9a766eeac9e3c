"""Five-option questions about a synthetic case: information extraction, negation and ordering/temporal.

Each generator returns a :class:`Draft` (or None when the case cannot support it): the question, the right
answer, four wrong answers from the same category, and the span keys of the evidence in the documents.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldgym.envs.longhealth import catalog
from worldgym.envs.longhealth.records import Case, Document, iso, lab_text, pick, sample
from worldgym.envs.longhealth.schema import OPTION_KEYS

__all__ = ["KINDS", "Draft", "make_questions"]

KINDS = ("extraction", "negation", "ordering")
# Share of each question type in a patient's questions (LongHealth mixes the same three types).
_SHARES = {"negation": 0.2, "ordering": 0.2}
_ROUTES = ("intravenously", "orally", "subcutaneously", "by inhalation", "sublingually", "intramuscularly")
_FREQUENCIES = ("once daily", "twice daily", "three times daily")


@dataclass(frozen=True)
class Draft:
    """A question before its options are shuffled: the answer, four wrong options and the evidence keys."""

    kind: str
    question: str
    correct: str
    wrong: tuple[str, ...]
    evidence: tuple[str, ...]


Generator = Callable[[Case, np.random.Generator], "Draft | None"]


def _draft(kind: str, question: str, correct: str, wrong: Sequence[str] | None,
           evidence: Iterable[str]) -> Draft | None:
    if wrong is None or len(set(wrong)) < 4 or correct in wrong:
        return None
    return Draft(kind, question, correct, tuple(wrong[:4]), tuple(evidence))


def _wrong(rng: np.random.Generator, correct: str, *pools: Iterable[str]) -> list[str] | None:
    """Four distinct wrong options: from the first pool, topped up from the next ones; None if too few."""
    chosen: list[str] = []
    for pool in pools:
        candidates = [x for x in dict.fromkeys(pool) if x != correct and x not in chosen]
        chosen += sample(rng, candidates, 4 - len(chosen))
        if len(chosen) == 4:
            return chosen
    return None


def _numbers(rng: np.random.Generator, correct: str, make: Callable[[], str], *seed: str) -> list[str] | None:
    """Wrong values: ``seed`` values first (other values the documents show), then ``make()`` draws."""
    values = [s for s in dict.fromkeys(seed) if s != correct][:2]
    for _ in range(200):
        if len(values) == 4:
            return values
        value = make()
        if value != correct and value not in values:
            values.append(value)
    return None


def _near_date(rng: np.random.Generator, day: dt.date, spread: int = 6) -> Callable[[], str]:
    return lambda: iso(day + dt.timedelta(days=int(rng.integers(-spread, spread + 1))))


# ---------------------------------------------------------------------------------------------- extraction


def _diagnosis(case: Case, rng: np.random.Generator) -> Draft | None:
    return _draft("extraction", f"What was the main diagnosis of {case.title} during this hospital stay?",
                  case.condition.diagnosis, _wrong(rng, case.condition.diagnosis,
                                                   [c.diagnosis for c in catalog.CONDITIONS]), ["diagnosis"])


def _allergy(case: Case, rng: np.random.Generator) -> Draft | None:
    return _draft("extraction", f"Which allergy is documented for {case.title}?", case.allergy,
                  _wrong(rng, case.allergy, catalog.ALLERGIES), ["allergy"])


def _occupation(case: Case, rng: np.random.Generator) -> Draft | None:
    return _draft("extraction", f"What is {case.title}'s occupation?", case.occupation,
                  _wrong(rng, case.occupation, catalog.OCCUPATIONS), ["occupation"])


def _chief_complaint(case: Case, rng: np.random.Generator) -> Draft | None:
    others = [s for s in case.condition.symptoms if s not in case.symptoms]
    rest = [s for s in catalog.SYMPTOMS if s not in case.symptoms]
    question = f"With which main complaint did {case.title} present to the emergency department?"
    return _draft("extraction", question, case.symptoms[0], _wrong(rng, case.symptoms[0], others, rest),
                  ["chief"])


def _lab_value(panel: int) -> Generator:
    def make(case: Case, rng: np.random.Generator) -> Draft | None:
        names = list(case.condition.abnormal) if panel == 0 else list(catalog.BASIC_LABS)
        name = pick(rng, names)
        value, other = case.labs[panel][name], case.labs[1 - panel][name]
        lab = catalog.LABS[name]
        span = max(abs(value), lab.high - lab.low, 10.0 ** -lab.decimals * 20)
        correct = lab_text(name, value)
        def draw() -> str:
            return lab_text(name, round(max(0.0, value + rng.uniform(-0.6, 0.6) * span), lab.decimals))

        wrong = _numbers(rng, correct, draw, lab_text(name, other))
        date = iso(case.day(case.lab_days[panel]))
        return _draft("extraction", f"What was {case.title}'s {name} in the laboratory report of {date}?",
                      correct, wrong, [f"lab:{panel}:{name}"])

    return make


def _blood_pressure(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = case.vitals["blood pressure"]

    def make() -> str:
        systolic = int(rng.integers(95, 176))
        return f"{systolic}/{int(rng.integers(55, systolic - 25))} mmHg"

    return _draft("extraction", f"What blood pressure was measured when {case.title} was admitted?", correct,
                  _numbers(rng, correct, make), ["vitals"])


def _temperature(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = case.vitals["temperature"]
    return _draft("extraction", f"What body temperature was recorded for {case.title} at admission?", correct,
                  _numbers(rng, correct, lambda: f"{rng.uniform(36.2, 39.6):.1f} degrees Celsius"),
                  ["vitals"])


def _procedure_date(case: Case, rng: np.random.Generator) -> Draft | None:
    performed = pick(rng, case.procedures)
    name = performed.procedure.name
    correct = iso(case.day(performed.day))
    others = [iso(case.day(p.day)) for p in case.procedures if p is not performed]
    return _draft("extraction", f"On which date was the {name} of {case.title} performed?", correct,
                  _numbers(rng, correct, _near_date(rng, case.day(performed.day)), *sample(rng, others, 2)),
                  [f"procedure_date:{name}", f"course:{name}"])


def _finding(index: int) -> Generator:
    def make(case: Case, rng: np.random.Generator) -> Draft | None:
        performed = case.procedures[index]
        name = performed.procedure.name
        return _draft("extraction", f"What did the {name} of {case.title} show?", performed.finding,
                      _wrong(rng, performed.finding, performed.procedure.findings),
                      [f"finding:{name}", f"course:{name}"])

    return make


def _discharge_dose(case: Case, rng: np.random.Generator) -> Draft | None:
    continued = [m for m in case.medications if m.stop_day is None and m.drug.oral]
    if not continued:
        return None
    m = pick(rng, continued)
    correct = f"{m.dose} {m.frequency}"
    combos = [f"{dose} {frequency}" for dose, frequency in itertools.product(m.drug.doses, (m.frequency,
                                                                                            *_FREQUENCIES))]
    return _draft("extraction", f"Which dose of {m.drug.name} was prescribed for {case.title} at discharge?",
                  correct, _wrong(rng, correct, combos), [f"discharge:{m.drug.name}", f"drug:{m.drug.name}"])


def _follow_up(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = iso(case.follow_up)
    return _draft("extraction", f"When is {case.title}'s follow-up appointment scheduled?", correct,
                  _numbers(rng, correct, _near_date(rng, case.follow_up, 14), iso(case.discharge)),
                  ["follow_up"])


def _attending(case: Case, rng: np.random.Generator) -> Draft | None:
    return _draft("extraction", f"Who was the attending physician responsible for {case.title}?",
                  case.attending, _wrong(rng, case.attending, catalog.PHYSICIANS), ["attending"])


def _department(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = case.condition.department
    return _draft("extraction", f"In which department was {case.title} treated as an inpatient?", correct,
                  _wrong(rng, correct, [c.department for c in catalog.CONDITIONS]), ["department"])


def _comorbidity_year(case: Case, rng: np.random.Generator) -> Draft | None:
    comorbidity, year = pick(rng, case.comorbidities)
    correct = str(year)
    return _draft("extraction", f"In which year was {case.title} diagnosed with {comorbidity.name}?", correct,
                  _numbers(rng, correct, lambda: str(min(year + int(rng.integers(-9, 10)),
                                                         case.admission.year)),
                           *(str(y) for _, y in case.comorbidities)),
                  [f"comorbidity:{comorbidity.name}"])


def _home_drug(case: Case, rng: np.random.Generator) -> Draft | None:
    comorbidity, _ = pick(rng, case.comorbidities)
    home_drugs = [c.drug for c in catalog.COMORBIDITIES.values()]
    return _draft("extraction", f"Which medication does {case.title} take at home for {comorbidity.name}?",
                  comorbidity.drug, _wrong(rng, comorbidity.drug, home_drugs), [f"home:{comorbidity.name}"])


def _admission_date(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = iso(case.admission)
    return _draft("extraction", f"On which date was {case.title} admitted to the hospital?", correct,
                  _numbers(rng, correct, _near_date(rng, case.admission, 10),
                           *(iso(case.day(p.day)) for p in case.procedures if p.day)),
                  ["admission_date", "stay"])


def _smoking(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = f"{case.pack_years} pack-years" if case.pack_years else "never smoked"
    return _draft("extraction", f"What smoking history is documented for {case.title}?", correct,
                  _numbers(rng, correct, lambda: f"{int(rng.integers(5, 70))} pack-years", "never smoked"),
                  ["smoking"])


def _route(case: Case, rng: np.random.Generator) -> Draft | None:
    m = pick(rng, case.medications)
    return _draft("extraction", f"How was {m.drug.name} given to {case.title}?", m.drug.route,
                  _wrong(rng, m.drug.route, _ROUTES), [f"drug:{m.drug.name}"])


# ---------------------------------------------------------------------------------------------- negation


def _absent(case: Case, candidates: Iterable[str], texts: Sequence[str]) -> list[str]:
    """Candidates no document of the case mentions (so "NOT" questions have exactly one right answer)."""
    return [c for c in candidates if not any(c.lower() in text.lower() for text in texts)]


def _not_given(case: Case, rng: np.random.Generator, texts: Sequence[str]) -> Draft | None:
    given = [m.drug.name for m in case.medications]
    absent = _absent(case, [d for d in case.condition.drugs if d not in given], texts)
    if not absent:
        return None
    shown = sample(rng, given, 4)
    return _draft("negation", f"Which of the following drugs was NOT given to {case.title} during the "
                  "hospital stay?", pick(rng, absent), shown, [f"drug:{d}" for d in shown])


def _not_performed(case: Case, rng: np.random.Generator, texts: Sequence[str]) -> Draft | None:
    done = [p.procedure.name for p in case.procedures]
    absent = _absent(case, [p for p in case.condition.procedures if p not in done], texts)
    if not absent:
        return None
    return _draft("negation", f"Which examination was NOT performed during {case.title}'s stay?",
                  pick(rng, absent), done, [f"procedure:{p}" for p in done])


def _not_reported(case: Case, rng: np.random.Generator, texts: Sequence[str]) -> Draft | None:
    absent = _absent(case, [s for s in case.condition.symptoms if s not in case.symptoms], texts)
    if not absent:
        return None
    return _draft("negation", f"Which symptom did {case.title} NOT report at admission?", pick(rng, absent),
                  list(case.symptoms), [f"symptom:{s}" for s in case.symptoms])


def _not_comorbid(case: Case, rng: np.random.Generator, texts: Sequence[str]) -> Draft | None:
    present = [c.name for c, _ in case.comorbidities]
    absent = _absent(case, [c for c in catalog.COMORBIDITIES if c not in present], texts)
    if len(present) < 4 or not absent:
        return None
    return _draft("negation", f"Which of the following is NOT a pre-existing condition of {case.title}?",
                  pick(rng, absent), present, [f"comorbidity:{c}" for c in present])


def _not_discharged_with(case: Case, rng: np.random.Generator, texts: Sequence[str]) -> Draft | None:
    discharge = [drug for drug, _, _ in case.discharge_medication()]
    stopped = [m.drug.name for m in case.medications if m.drug.name not in discharge]
    if len(discharge) < 4 or not stopped:
        return None
    shown, correct = sample(rng, discharge, 4), pick(rng, stopped)
    return _draft("negation", f"Which drug is NOT part of {case.title}'s discharge medication?", correct,
                  shown, [*(f"discharge:{d}" for d in shown), f"drug:{correct}"])


# ---------------------------------------------------------------------------------------------- ordering


def _exam_order(case: Case, rng: np.random.Generator) -> Draft | None:
    chosen = sorted(sample(rng, case.procedures, 3), key=lambda p: p.day)
    names = [p.procedure.name for p in chosen]
    orders = [", then ".join(order) for order in itertools.permutations(names)]
    return _draft("ordering", f"In which order were the following examinations of {case.title} performed "
                  f"(earliest first)?", orders[0], _wrong(rng, orders[0], orders[1:]),
                  [f"procedure_date:{n}" for n in names])


def _exam_extreme(last: bool) -> Generator:
    def make(case: Case, rng: np.random.Generator) -> Draft | None:
        done = [p.procedure.name for p in case.procedures]
        extra = [p for p in case.condition.procedures if p not in done]
        correct = done[-1] if last else done[0]
        which = "last" if last else "first"
        question = f"Which of these examinations was performed {which} during {case.title}'s stay?"
        return _draft("ordering", question, correct, _wrong(rng, correct, done, extra),
                      [f"procedure_date:{n}" for n in done])

    return make


def _drug_extreme(last: bool) -> Generator:
    def make(case: Case, rng: np.random.Generator) -> Draft | None:
        days = [m.start_day for m in case.medications]
        target = max(days) if last else min(days)
        if days.count(target) != 1:
            return None
        correct = next(m.drug.name for m in case.medications if m.start_day == target)
        which = "last" if last else "first"
        question = f"Which of these drugs was started {which} during {case.title}'s stay?"
        wrong = [m.drug.name for m in case.medications if m.drug.name != correct]
        return _draft("ordering", question, correct, wrong, [f"drug:{m.drug.name}" for m in case.medications])

    return make


def _days_after_admission(case: Case, rng: np.random.Generator) -> Draft | None:
    performed = pick(rng, case.procedures)

    def text(days: int) -> str:
        plural = "s" if days > 1 else ""
        return "on the day of admission" if days == 0 else f"{days} day{plural} after admission"

    correct = text(performed.day)
    others = [text(p.day) for p in case.procedures if p is not performed]
    return _draft("ordering", f"When was the {performed.procedure.name} of {case.title} performed, relative "
                  "to the admission?", correct,
                  _numbers(rng, correct, lambda: text(int(rng.integers(0, case.stay_days))), *others),
                  [f"procedure_date:{performed.procedure.name}", "admission_date"])


def _lab_trend(case: Case, rng: np.random.Generator) -> Draft | None:
    name = pick(rng, list(case.condition.abnormal))
    before, after = case.labs[0][name], case.labs[1][name]
    if before == after:
        return None
    lab = catalog.LABS[name]
    t0, t1 = lab_text(name, before), lab_text(name, after)
    verb, other_verb = ("fell", "rose") if after < before else ("rose", "fell")
    correct = f"it {verb} from {t0} to {t1}"
    step = abs(after - before)
    near = [lab_text(name, round(max(0.0, after + k * step), lab.decimals)) for k in (-0.5, 0.5, 1.0)]
    wrong = [f"it {other_verb} from {t1} to {t0}", f"it stayed at {t0}",
             *(f"it {verb} from {t0} to {x}" for x in near if x not in (t0, t1))]
    d0, d1 = (iso(case.day(d)) for d in case.lab_days)
    return _draft("ordering", f"How did {case.title}'s {name} develop between {d0} and {d1}?", correct,
                  _wrong(rng, correct, wrong), [f"trend:{name}", f"lab:0:{name}", f"lab:1:{name}"])


def _stay_length(case: Case, rng: np.random.Generator) -> Draft | None:
    correct = f"{case.stay_days} days"
    return _draft("ordering", f"How many days did {case.title} spend in the hospital?", correct,
                  _numbers(rng, correct, lambda: f"{case.stay_days + int(rng.integers(-6, 7))} days"),
                  ["stay"])


_EXTRACTION: tuple[Generator, ...] = (
    _diagnosis, _allergy, _occupation, _chief_complaint, _lab_value(0), _lab_value(1), _blood_pressure,
    _temperature, _procedure_date, _finding(0), _finding(2), _discharge_dose, _follow_up, _attending,
    _department, _comorbidity_year, _home_drug, _admission_date, _smoking, _route,
)
_NEGATION = (_not_given, _not_performed, _not_reported, _not_comorbid, _not_discharged_with)
_ORDERING: tuple[Generator, ...] = (
    _exam_order, _exam_extreme(False), _exam_extreme(True), _drug_extreme(False), _drug_extreme(True),
    _days_after_admission, _lab_trend, _stay_length,
)


def make_questions(case: Case, documents: Sequence[Document], rng: np.random.Generator,
                   count: int) -> list[dict[str, Any]]:
    """``count`` questions about ``case`` as LongHealth JSON rows (``No`` 1..count, shuffled options, answer
    locations from the evidence spans, ``"type"`` the question type); about 20% negation, 20% ordering."""
    texts = [doc.text for doc in documents]
    drafts = {
        "extraction": [g(case, rng) for g in _EXTRACTION],
        "negation": [g(case, rng, texts) for g in _NEGATION],
        "ordering": [g(case, rng) for g in _ORDERING],
    }
    pools = {kind: sample(rng, [d for d in found if d is not None], len(found))
             for kind, found in drafts.items()}
    quota = {kind: min(round(count * share), len(pools[kind])) for kind, share in _SHARES.items()}
    quota["extraction"] = count - sum(quota.values())
    chosen = [d for kind in KINDS for d in pools[kind][:quota[kind]]]
    spare = [d for kind in KINDS for d in pools[kind][quota[kind]:]]
    chosen += spare[: count - len(chosen)]
    if len(chosen) < count:
        raise ValueError(f"a synthetic patient supports at most {len(chosen)} questions, asked for {count}")
    ordered = sample(rng, chosen, count)
    return [_row(number, draft, documents, rng) for number, draft in enumerate(ordered, start=1)]


def _row(number: int, draft: Draft, documents: Sequence[Document],
         rng: np.random.Generator) -> dict[str, Any]:
    options = [draft.correct, *draft.wrong]
    options = [options[int(i)] for i in rng.permutation(5)]
    row: dict[str, Any] = {"No": number, "question": draft.question}
    row.update(zip(OPTION_KEYS, options))
    row["correct"] = draft.correct
    row["answer_location"] = _locations(draft.evidence, documents)
    row["type"] = draft.kind
    return row


def _locations(keys: Sequence[str], documents: Sequence[Document]) -> dict[str, dict[str, list[float]]]:
    locations = {}
    for i, doc in enumerate(documents):
        spans = sorted({span for key in keys for span in doc.spans.get(key, ())})
        if spans:
            length = len(doc.text)
            locations[f"text_{i}"] = {"start": [round(s / length, 4) for s, _ in spans],
                                      "end": [round(min(e, length) / length, 4) for _, e in spans]}
    if not locations:
        raise RuntimeError(f"no document holds the evidence {list(keys)} (a question generator bug)")
    return locations
