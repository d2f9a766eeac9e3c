"""One fictional patient's case (facts drawn from a seeded RNG) and its clinical documents, with the character
span of every fact so questions can point at their evidence."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from worldgym.envs.longhealth import catalog
from worldgym.envs.longhealth.catalog import Comorbidity, Condition, Drug, Procedure

__all__ = ["Case", "Document", "Medication", "Performed", "render_documents", "sample_case"]

T = TypeVar("T")
_FIRST_YEAR, _YEARS = 2014, 10  # admissions fall in 2014-2023


def pick(rng: np.random.Generator, items: Sequence[T]) -> T:
    """One item of ``items``, uniformly."""
    return items[int(rng.integers(len(items)))]


def sample(rng: np.random.Generator, items: Sequence[T], k: int) -> list[T]:
    """``k`` distinct items of ``items`` in random order."""
    return [items[int(i)] for i in rng.permutation(len(items))[:k]]


def iso(day: dt.date) -> str:
    """A date as the documents write it (ISO, ``2019-04-17``)."""
    return day.isoformat()


@dataclass(frozen=True)
class Performed:
    """An examination done on ``day`` (days after admission) with the finding its report states."""

    procedure: Procedure
    day: int
    finding: str
    examiner: str


@dataclass(frozen=True)
class Medication:
    """An inpatient drug: dose, frequency, first and last day (``stop_day`` None: continued at discharge)."""

    drug: Drug
    dose: str
    frequency: str
    start_day: int
    stop_day: int | None


@dataclass(frozen=True)
class Case:
    """Everything true about one fictional patient; the documents and questions are rendered from it."""

    patient_id: str
    first_name: str
    last_name: str
    female: bool
    birthday: dt.date
    admission: dt.date
    stay_days: int
    condition: Condition
    hospital: str
    attending: str
    resident: str
    symptoms: tuple[str, ...]  # the first is the chief complaint
    symptom_days: tuple[int, ...]
    comorbidities: tuple[tuple[Comorbidity, int], ...]  # (condition, year diagnosed)
    allergy: str
    occupation: str
    pack_years: int  # 0: never smoked
    vitals: dict[str, str]
    procedures: tuple[Performed, ...]  # by day, days distinct
    medications: tuple[Medication, ...]
    labs: tuple[dict[str, float], dict[str, float]]  # admission panel, follow-up panel
    lab_days: tuple[int, int]
    follow_up: dt.date
    follow_up_clinic: str

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"

    @property
    def title(self) -> str:
        """How questions address the patient, ``Ms. Lindqvist``."""
        return f"{'Ms.' if self.female else 'Mr.'} {self.last_name}"

    @property
    def pronoun(self) -> str:
        return "she" if self.female else "he"

    @property
    def discharge(self) -> dt.date:
        return self.day(self.stay_days)

    def day(self, offset: int) -> dt.date:
        """The date ``offset`` days after admission."""
        return self.admission + dt.timedelta(days=offset)

    def age(self) -> int:
        """Age in years on the day of admission."""
        before = (self.admission.month, self.admission.day) < (self.birthday.month, self.birthday.day)
        return self.admission.year - self.birthday.year - int(before)

    def discharge_medication(self) -> list[tuple[str, str, str]]:
        """(drug, dose, frequency) the discharge letter lists: continued oral inpatient drugs, then home
        drugs."""
        continued = [(m.drug.name, m.dose, m.frequency) for m in self.medications
                     if m.stop_day is None and m.drug.oral]
        home = [(c.drug, c.dose, c.frequency) for c, _ in self.comorbidities]
        return continued + home


def sample_case(rng: np.random.Generator, patient_id: str, taken_names: set[str]) -> Case:
    """A fictional patient's case; the name differs from every name in ``taken_names``, and so does the last
    name while unused last names remain (questions call a patient "Ms. <last name>")."""
    female = bool(rng.integers(2))
    taken_last = {name.split()[-1] for name in taken_names}
    while True:
        first = pick(rng, catalog.FEMALE_NAMES if female else catalog.MALE_NAMES)
        last = pick(rng, catalog.LAST_NAMES)
        repeats_last = last in taken_last and len(taken_last) < len(catalog.LAST_NAMES)
        if f"{first} {last}" not in taken_names and not repeats_last:
            break
    condition = pick(rng, catalog.CONDITIONS)
    admission = dt.date(_FIRST_YEAR, 1, 1) + dt.timedelta(days=int(rng.integers(365 * _YEARS)))
    birth_year = admission.year - int(rng.integers(38, 88))
    birthday = dt.date(birth_year, int(rng.integers(1, 13)), int(rng.integers(1, 29)))
    stay = int(rng.integers(8, 22))
    physicians = sample(rng, catalog.PHYSICIANS, 4)
    symptoms = tuple(sample(rng, condition.symptoms, 4))
    eligible = [name for name in catalog.COMORBIDITIES if not (female and name in catalog.MALE_ONLY)]
    comorbidity_names = sample(rng, eligible, int(rng.integers(2, 5)))
    comorbidities = tuple((catalog.COMORBIDITIES[name], int(rng.integers(birthday.year + 25, admission.year)))
                          for name in comorbidity_names)
    procedure_days = sorted(int(d) for d in rng.choice(stay - 1, size=4, replace=False))
    procedures = tuple(
        Performed(catalog.PROCEDURES[name], day, pick(rng, catalog.PROCEDURES[name].findings),
                  pick(rng, physicians))
        for name, day in zip(sample(rng, condition.procedures, 4), procedure_days))
    lab_days = (0, int(rng.integers(3, stay - 1)))
    admission_labs = _lab_panel(rng, condition, None)
    return Case(
        patient_id, first, last, female, birthday, admission, stay, condition, pick(rng, catalog.HOSPITALS),
        physicians[0], physicians[1], symptoms, tuple(sorted((int(d) for d in rng.integers(1, 15, size=4)),
                                                             reverse=True)),
        comorbidities, pick(rng, catalog.ALLERGIES), pick(rng, catalog.OCCUPATIONS),
        int(rng.integers(8, 60)) if rng.random() < 0.5 else 0, _vitals(rng),
        procedures, _medications(rng, condition, stay),
        (admission_labs, _lab_panel(rng, condition, admission_labs)),
        lab_days, admission + dt.timedelta(days=stay + int(rng.integers(14, 60))),
        f"outpatient clinic of {condition.department.lower()}",
    )


def _vitals(rng: np.random.Generator) -> dict[str, str]:
    systolic = int(rng.integers(95, 176))
    return {
        "blood pressure": f"{systolic}/{int(rng.integers(55, min(systolic - 25, 105)))} mmHg",
        "heart rate": f"{int(rng.integers(58, 124))} per minute",
        "temperature": f"{rng.uniform(36.2, 39.6):.1f} degrees Celsius",
        "oxygen saturation": f"{int(rng.integers(86, 100))}% on room air",
        "respiratory rate": f"{int(rng.integers(12, 29))} per minute",
    }


def _medications(rng: np.random.Generator, condition: Condition, stay: int) -> tuple[Medication, ...]:
    drugs = [catalog.DRUGS[name] for name in sample(rng, condition.drugs, 5)]
    starts = [0] + [int(rng.integers(0, stay - 2)) for _ in drugs[1:]]
    medications = []
    for drug, start in zip(drugs, starts):
        stop = None if drug.oral and rng.random() < 0.75 else int(rng.integers(start + 1, stay + 1))
        medications.append(Medication(drug, pick(rng, drug.doses), drug.frequency, start, stop))
    return tuple(sorted(medications, key=lambda m: m.start_day))


def _lab_panel(rng: np.random.Generator, condition: Condition,
               before: dict[str, float] | None) -> dict[str, float]:
    """Basic labs plus the condition's abnormal ones: out of range at admission, moving back toward the
    reference range in the follow-up panel (``before`` is the admission panel)."""
    names = list(catalog.BASIC_LABS) + [n for n in condition.abnormal if n not in catalog.BASIC_LABS]
    panel = {}
    for name in names:
        lab = catalog.LABS[name]
        if before is None:
            low, high = condition.abnormal.get(name, (lab.low + 0.1 * (lab.high - lab.low),
                                                      lab.high - 0.1 * (lab.high - lab.low)))
            value = rng.uniform(low, high)
        elif name in condition.abnormal:  # recovering: part of the way back to the reference range's middle
            middle = (lab.low + lab.high) / 2
            value = before[name] + rng.uniform(0.3, 0.8) * (middle - before[name])
        else:
            value = before[name] * rng.uniform(0.9, 1.1)
        panel[name] = round(float(value), lab.decimals)
    return panel


def lab_text(name: str, value: float) -> str:
    """A lab value with its unit, written as the report writes it (``11.2 g/dL``)."""
    lab = catalog.LABS[name]
    return f"{value:.{lab.decimals}f} {lab.unit}"


@dataclass
class Document:
    """A document being written: its text, and the character spans written under each fact key."""

    parts: list[str] = field(default_factory=list)
    spans: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    length: int = 0

    def write(self, text: str, *keys: str) -> Document:
        """Append ``text``; record its span under each of ``keys``."""
        for key in keys:
            self.spans[key].append((self.length, self.length + len(text)))
        self.parts.append(text)
        self.length += len(text)
        return self

    def line(self, text: str = "", *keys: str) -> Document:
        """Append ``text`` and a newline."""
        return self.write(text, *keys).write("\n")

    @property
    def text(self) -> str:
        return "".join(self.parts).rstrip("\n")


def render_documents(case: Case, rng: np.random.Generator) -> list[Document]:
    """The case's documents in chronological order: admission note, lab reports, one report per examination,
    the inpatient medication record and the discharge letter."""
    dated: list[tuple[int, Document]] = [(0, _admission_note(case, rng)), (0, _lab_report(case, 0, rng))]
    dated += [(p.day, _procedure_report(case, p, rng)) for p in case.procedures]
    dated.append((case.lab_days[1], _lab_report(case, 1, rng)))
    dated.sort(key=lambda item: item[0])  # stable: same-day documents keep their order
    return [doc for _, doc in dated] + [_medication_record(case, rng), _discharge_letter(case, rng)]


def _header(case: Case, department: str, title: str, *keys: str) -> Document:
    doc = Document()
    doc.line(f"{case.hospital} - {department}").line(title, *keys)
    doc.line(f"Patient: {case.title.split()[0]} {case.name}, born {iso(case.birthday)}").line()
    return doc


_HISTORY_NOTES = (
    "There was no recent travel abroad.", "{He} denies contact with sick persons.",
    "{He} had tried over-the-counter remedies at home without relief.",
    "The symptoms had worsened over the last two days.", "{He} was brought in by {his} daughter.",
    "The family doctor had referred {him} for further evaluation.",
    "{He} reports poor sleep since the onset.",
    "No similar episodes had occurred before.", "{He} last saw {his} family doctor three months ago.",
)
_FAMILY_HISTORY = (
    "The father died of a myocardial infarction at the age of 71.",
    "The mother suffers from type 2 diabetes.",
    "A brother was treated for colon cancer.", "The family history is unremarkable.",
    "The mother had a stroke at the age of 79.", "A sister has rheumatoid arthritis.",
)
_EXAMINATION = (
    "General: alert and oriented, in moderately reduced general condition.",
    "General: awake, oriented, in good nutritional state.",
    "Heart: regular rhythm, no murmurs.", "Heart: regular rhythm, soft systolic murmur over the apex.",
    "Lungs: vesicular breath sounds on both sides.", "Lungs: fine crackles over the right base.",
    "Abdomen: soft, no guarding, normal bowel sounds.",
    "Abdomen: tender in the upper quadrants, no guarding.",
    "Extremities: no edema, peripheral pulses palpable.", "Extremities: pitting edema of both ankles.",
    "Neurology: no focal deficits apart from those described.", "Skin: warm and dry, no rash.",
)
_LAB_COMMENTS = (
    "Values outside the reference range are marked H (high) or L (low).",
    "The sample was received in good condition; hemolysis index normal.",
    "Critical values were reported by telephone to the ward.",
)
_REPORT_NOTES = (
    "The examination was performed without complications.", "Image quality was good.",
    "The patient tolerated the procedure well.", "Previous examinations were available for comparison.",
    "The findings were discussed with the treating team on the same day.",
)
_NURSING_NOTES = (
    "Medication was given as prescribed; no adverse reactions were observed.",
    "The patient was instructed in the use of the inhalers.", "Blood glucose was checked before each meal.",
    "Pain was assessed three times daily on a numeric scale.", "Fluid balance was recorded daily.",
)
_RECOMMENDATIONS = (
    "We recommend regular blood pressure checks by the family doctor.",
    "Laboratory controls of blood count and creatinine are advised within one week.",
    "Physical exertion should be increased gradually.", "A vaccination against influenza is recommended.",
    "{He} was advised to stop smoking.", "A rehabilitation program has been requested.",
    "Please continue the medication unchanged until the follow-up visit.",
)


def _days(count: int) -> str:
    return f"{count} day{'' if count == 1 else 's'}"


def _fill(text: str, case: Case) -> str:
    he = case.pronoun
    his, him = ("her", "her") if case.female else ("his", "him")
    return text.format(He=he.capitalize(), he=he, his=his, him=him)


def _admission_note(case: Case, rng: np.random.Generator) -> Document:
    doc = _header(case, f"Department of {case.condition.department}", "Admission note")
    doc.line(f"Date of admission: {iso(case.admission)}", "admission_date")
    doc.line(f"Attending physician: {case.attending}", "attending").line()
    he = case.pronoun.capitalize()
    doc.line("Reason for admission:")
    doc.line(f"{case.title} presented to the emergency department with {case.symptoms[0]} for "
             f"{_days(case.symptom_days[0])}.", "chief", f"symptom:{case.symptoms[0]}").line()
    doc.line("History of present illness:")
    job = case.occupation
    article = "an" if job[0] in "aeiou" else "a"
    work = f"is a {job}" if job.startswith("retired") else f"works as {article} {job}"
    doc.write(f"The {case.age()}-year-old patient {work}. ", "occupation")
    for symptom, days in zip(case.symptoms[1:], case.symptom_days[1:]):
        doc.write(f"{he} also reports {symptom}, which began {_days(days)} before admission. ",
                  f"symptom:{symptom}")
    for note in sample(rng, _HISTORY_NOTES, 2):
        doc.write(_fill(note, case) + " ")
    doc.line().line().line("Past medical history:")
    for comorbidity, year in case.comorbidities:
        doc.line(f"- {comorbidity.name} (diagnosed in {year})", f"comorbidity:{comorbidity.name}")
    doc.line().line("Home medication:")
    for comorbidity, _ in case.comorbidities:
        doc.line(f"- {comorbidity.drug} {comorbidity.dose} {comorbidity.frequency}",
                 f"home:{comorbidity.name}")
    doc.line().line(f"Allergies: {case.allergy} (rash and itching).", "allergy").line()
    doc.line("Social history:")
    smoking = (f"{he} has a smoking history of {case.pack_years} pack-years." if case.pack_years
               else f"{he} has never smoked.")
    doc.write(smoking + " ", "smoking")
    doc.line(_fill(pick(rng, ("{He} drinks alcohol occasionally.", "{He} does not drink alcohol.",
                              "{He} drinks one glass of wine most evenings.")), case))
    doc.line(_fill(pick(rng, ("{He} lives with {his} partner.", "{He} lives with {his} son's family.",
                              "{He} lives alone in a flat on the second floor.")), case)).line()
    doc.line("Family history:").line(" ".join(sample(rng, _FAMILY_HISTORY, 2))).line()
    doc.line("Physical examination:")
    doc.line("Vital signs: " + ", ".join(f"{k} {v}" for k, v in case.vitals.items()) + ".", "vitals")
    for finding in sample(rng, _EXAMINATION, 5):
        doc.line(finding)
    doc.line().line("Assessment and plan:")
    doc.write(f"Suspected {case.condition.diagnosis}. ", "suspected")
    started = [m.drug.name for m in case.medications if m.start_day == 0]
    doc.line(f"Admission to the ward; {', '.join(started)} started. Further diagnostics as indicated.")
    return doc


def _lab_report(case: Case, panel: int, rng: np.random.Generator) -> Document:
    day = case.day(case.lab_days[panel])
    doc = _header(case, "Central Laboratory", "Laboratory report")
    doc.line(f"Sample taken: {iso(day)}, {pick(rng, ('06:30', '07:15', '08:00', '11:40'))}",
             f"labdate:{panel}").line()
    for name, value in case.labs[panel].items():
        lab = catalog.LABS[name]
        flag = " H" if value > lab.high else " L" if value < lab.low else ""
        low = f"{lab.low:.{lab.decimals}f}" if lab.low else "0"
        doc.line(f"{name}: {lab_text(name, value)}{flag} (reference {low}-{lab.high:.{lab.decimals}f})",
                 f"lab:{panel}:{name}")
    doc.line().line(pick(rng, _LAB_COMMENTS)).line(f"Validated by: {pick(rng, catalog.PHYSICIANS)}")
    return doc


def _procedure_report(case: Case, performed: Performed, rng: np.random.Generator) -> Document:
    procedure = performed.procedure
    department = {"imaging": "Department of Radiology", "endoscopy": "Endoscopy Unit",
                  "biopsy": "Institute of Pathology"}.get(procedure.kind,
                                                         f"Department of {case.condition.department}")
    key = f"procedure:{procedure.name}"
    doc = _header(case, department, f"Report: {procedure.name}", key)
    doc.line(f"Date of examination: {iso(case.day(performed.day))}", key, f"procedure_date:{procedure.name}")
    reason = pick(rng, ("suspected", "work-up of", "staging and planning for", "follow-up of"))
    doc.line(f"Indication: {reason} {case.condition.diagnosis}.").line()
    doc.line(f"Findings: {performed.finding[0].upper()}{performed.finding[1:]}.", key,
             f"finding:{procedure.name}")
    doc.line(" ".join(sample(rng, _REPORT_NOTES, 2))).line()
    doc.line(f"Examiner: {performed.examiner}")
    return doc


def _medication_record(case: Case, rng: np.random.Generator) -> Document:
    doc = _header(case, f"Department of {case.condition.department}", "Inpatient medication record")
    doc.line(f"Period: {iso(case.admission)} to {iso(case.discharge)}").line()
    for m in case.medications:
        until = "continued at discharge" if m.stop_day is None else f"stopped on {iso(case.day(m.stop_day))}"
        doc.line(f"- {m.drug.name} {m.dose} {m.drug.route} {m.frequency}, started on "
                 f"{iso(case.day(m.start_day))}, {until}", f"drug:{m.drug.name}")
    doc.line().line("Nursing notes: " + " ".join(sample(rng, _NURSING_NOTES, 3)))
    return doc


def _discharge_letter(case: Case, rng: np.random.Generator) -> Document:
    doc = _header(case, f"Department of {case.condition.department}", "Discharge letter")
    he, title = case.pronoun.capitalize(), case.title
    doc.line("Dear colleague,")
    doc.write(f"we report on {title}, born {iso(case.birthday)}, who was treated as an inpatient in our "
              f"department of {case.condition.department.lower()} ", "department")
    doc.line(f"from {iso(case.admission)} to {iso(case.discharge)}.", "stay").line()
    doc.line(f"Diagnosis: {case.condition.diagnosis}", "diagnosis")
    doc.line("Secondary diagnoses: " + "; ".join(c.name for c, _ in case.comorbidities), "secondary").line()
    doc.line("Course:")
    doc.write(f"{title} was admitted with {case.symptoms[0]}. ")
    for p in case.procedures:
        doc.write(f"On {iso(case.day(p.day))}, the {p.procedure.name} showed {p.finding}. ",
                  f"course:{p.procedure.name}")
    doc.write(f"In summary, {case.condition.course}. ")
    for name in case.condition.abnormal:
        before, after = case.labs[0][name], case.labs[1][name]
        doc.write(f"The {name} changed from {lab_text(name, before)} on {iso(case.day(case.lab_days[0]))} to "
                  f"{lab_text(name, after)} on {iso(case.day(case.lab_days[1]))}. ", f"trend:{name}")
    doc.line(f"{he} was discharged in stable condition.").line()
    doc.line("Discharge medication:")
    for drug, dose, frequency in case.discharge_medication():
        doc.line(f"- {drug} {dose} {frequency}", f"discharge:{drug}")
    doc.line().line("Recommendations:")
    for note in sample(rng, _RECOMMENDATIONS, 2):
        doc.line(_fill(note, case))
    doc.line(f"A follow-up appointment in our {case.follow_up_clinic} is scheduled for "
             f"{iso(case.follow_up)}.", "follow_up").line()
    doc.line("With kind regards,").line(f"{case.attending}, attending physician", "attending")
    doc.line(f"{case.resident}, resident physician")
    return doc
