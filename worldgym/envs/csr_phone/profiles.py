"""Customer profiles: the authentication fields a CSR may ask for, and a seeded generator of their values."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["FIELD_PHRASES", "CustomerProfile", "generate_profile", "normalize_value"]

# Every profile field, with the words a CSR says for it. No phrase is a substring of another, so a reply that
# names missing fields can be read back unambiguously (tests check this).
FIELD_PHRASES: dict[str, str] = {
    "full_name": "full name",
    "date_of_birth": "date of birth",
    "zip_code": "billing ZIP code",
    "email": "email address",
    "phone_on_file": "phone number on file",
    "account_number": "account number",
    "last_4_ssn": "last four digits of the SSN",
    "last_4_cc": "last four digits of the card",
    "pin": "security PIN",
    "mothers_maiden_name": "mother's maiden name",
    "member_id": "member ID",
    "policy_number": "policy number",
    "frequent_flyer_number": "frequent flyer number",
    "booking_reference": "booking reference",
    "service_address": "service address",
    "meter_number": "meter number",
}

_FIRST_NAMES = (
    "Avery", "Jordan", "Priya", "Mateo", "Chen", "Fatima", "Lukas", "Amara", "Diego", "Hana", "Olivia",
    "Kwame", "Sofia", "Ravi", "Elena", "Tomasz", "Aisha", "Noah", "Yuki", "Gabriel", "Ines", "Samuel",
    "Leila", "Oscar",
)
_LAST_NAMES = (
    "Okafor", "Lindqvist", "Ramirez", "Nakamura", "Patel", "Kowalski", "Haddad", "Fischer", "Mensah",
    "Moreau",
    "Silva", "Novak", "Byrne", "Castillo", "Ivanova", "Achebe", "Larsen", "Romano", "Tanaka", "Whitfield",
)
_STREETS = ("Maple St", "Oak Ave", "Harbor Rd", "Cedar Ln", "Willow Way", "Pine Ct", "Lakeview Dr", "Elm St")
_BOOKING_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True)
class CustomerProfile:
    """The customer the agent acts for; ``values`` maps every field of :data:`FIELD_PHRASES` to its value."""

    values: dict[str, str]
    _normalized: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The customer's full name."""
        return self.values["full_name"]

    def matches(self, field: str, given: object) -> bool:
        """Whether ``given`` is this customer's value of ``field`` (case, spaces and punctuation ignored)."""
        if not isinstance(given, str):
            return False
        expected = self._normalized.get(field)
        if expected is None:
            expected = self._normalized[field] = normalize_value(self.values[field])
        return normalize_value(given) == expected


_NOT_ALNUM = re.compile(r"[\W_]+")


def normalize_value(value: str) -> str:
    """``value`` lower-cased with everything but letters and digits removed: how a CSR compares answers."""
    return _NOT_ALNUM.sub("", value.lower())


def generate_profile(rng: np.random.Generator) -> CustomerProfile:
    """A random customer: every field derived from one bulk draw of ``rng`` (cheap on every reset)."""
    draws = rng.integers(0, 10**16, size=4).tolist()
    digits = "".join(f"{chunk:016d}" for chunk in draws[:3])
    picks = [draws[3] >> (6 * i) & 0x3F for i in range(8)]
    first = _FIRST_NAMES[picks[0] % len(_FIRST_NAMES)]
    last = _LAST_NAMES[picks[1] % len(_LAST_NAMES)]
    maiden = _LAST_NAMES[(picks[1] + 1 + picks[2] % (len(_LAST_NAMES) - 1)) % len(_LAST_NAMES)]
    booking = "".join(_BOOKING_CHARS[int(digits[i:i + 2]) % len(_BOOKING_CHARS)] for i in range(0, 12, 2))
    year, month, day = 1940 + picks[4] % 65, 1 + picks[5] % 12, 1 + picks[6] % 28
    values = {
        "full_name": f"{first} {last}",
        "date_of_birth": f"{year:04d}-{month:02d}-{day:02d}",
        "zip_code": str(10000 + int(digits[0:5]) % 89999),
        "email": f"{first.lower()}.{last.lower()}{digits[5:7]}@example.com",
        "phone_on_file": f"555-{digits[7:10]}-{digits[10:14]}",
        "account_number": str(1 + int(digits[14])) + digits[15:24],
        "last_4_ssn": digits[24:28],
        "last_4_cc": digits[28:32],
        "pin": digits[32:36],
        "mothers_maiden_name": maiden,
        "member_id": "M" + digits[36:44],
        "policy_number": "POL-" + digits[40:47],
        "frequent_flyer_number": "FF" + digits[38:47],
        "booking_reference": booking,
        "service_address": f"{1 + int(digits[44:47])} {_STREETS[picks[7] % len(_STREETS)]}",
        "meter_number": "MTR-" + digits[41:48],
    }
    return CustomerProfile(values)
