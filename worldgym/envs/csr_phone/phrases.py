"""Paraphrase families for the CSR's spoken replies, one family per response type, drawn from the env RNG."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "AUTH_FAILED",
    "AUTH_REQUEST",
    "GREETINGS",
    "INVALID_NUMBER",
    "PARAPHRASES",
    "PREREQUISITE_REASONS",
    "PREREQUISITE_REQUIRED",
    "RESPONSE_TYPES",
    "ROUTING",
    "SERVICE_PROVIDED",
    "TASK_COMPLETE",
    "WRONG_DEPARTMENT",
    "join_phrases",
    "render_reply",
]

AUTH_REQUEST = "auth_request"
AUTH_FAILED = "auth_failed"
SERVICE_PROVIDED = "service_provided"
TASK_COMPLETE = "task_complete"
ROUTING = "routing"
WRONG_DEPARTMENT = "wrong_department"
PREREQUISITE_REQUIRED = "prerequisite_required"
INVALID_NUMBER = "invalid_number"
RESPONSE_TYPES = (AUTH_REQUEST, AUTH_FAILED, SERVICE_PROVIDED, TASK_COMPLETE, ROUTING, WRONG_DEPARTMENT,
                  PREREQUISITE_REQUIRED, INVALID_NUMBER)

# Slots: {fields} spoken field list, {target}/{number} a department and its phone number, {prerequisite} a
# department to call first, {reason} why, {next} the department to call back, {goal} the customer's task.
PARAPHRASES: dict[str, tuple[str, ...]] = {
    AUTH_REQUEST: (
        "Before I can help, I need to verify your identity. Can you give me your {fields}?",
        "I'll need your {fields} to pull up the account.",
        "For security, please provide your {fields}.",
        "Sure, I can look into that. First, what is your {fields}?",
        "I can't access the account without your {fields}. Could you read those to me?",
        "To verify you, I still need your {fields}.",
    ),
    AUTH_FAILED: (
        "I'm sorry, the details you gave don't match anything in our records.",
        "Hmm, I can't find an account matching that information.",
        "That information doesn't match what we have on file, so I can't continue.",
        "I wasn't able to verify you with those details. Please double-check them.",
        "Unfortunately those details don't line up with any account I can see.",
    ),
    SERVICE_PROVIDED: (
        "All set: I've {reason}. You can now call {next} back and they'll be able to help.",
        "Done. I've {reason}, so {next} can take it from here.",
        "Okay, I've {reason}. Please go ahead and contact {next} now.",
        "That's taken care of; I've {reason}. {next} will be able to continue with your request.",
        "Thanks for your patience. I've {reason}. Your next step is to call {next}.",
    ),
    TASK_COMPLETE: (
        "Great news, I was able to {goal} for you. Is there anything else?",
        "That's all done: I've processed your request to {goal}.",
        "Perfect, your request to {goal} is complete. Thanks for calling!",
        "I've gone ahead and completed that for you, so you're all set to {goal}. Have a great day.",
        "Everything is processed; the request to {goal} went through.",
    ),
    ROUTING: (
        "That request is handled by {target}. Their number is {number}.",
        "You'll want to speak with {target} for that. You can reach them at {number}.",
        "I can't do that from here, but {target} can. Please call {number}.",
        "Let me point you in the right direction: {target} handles that, at {number}.",
        "For that you need {target}; the direct line is {number}.",
    ),
    WRONG_DEPARTMENT: (
        "I'm sorry, that's not something our department handles. Our main {router} line can direct you.",
        "We don't handle that request here. Please try {router}.",
        "That's outside what I can do in this department; {router} can tell you who handles it.",
        "You've reached the wrong department for that, I'm afraid. {router} should be able to route you.",
    ),
    PREREQUISITE_REQUIRED: (
        "Before I can help with that, you need to contact {prerequisite} first so they can {reason}.",
        "I see you haven't spoken with {prerequisite} yet. They need to {reason} before I can go further.",
        "Our process requires {prerequisite} to {reason} first. Please call them and then call us back.",
        "I can't proceed until {prerequisite} has had a chance to {reason}. Please reach out to them first.",
        "You'll need to go through {prerequisite} first; they have to {reason} before we can take this on.",
    ),
    INVALID_NUMBER: (
        "We're sorry, the number you have dialed is not in service. Please check the number and try again.",
        "The number you called cannot be reached. Please check the number and dial again.",
        "This number is not assigned. Please hang up and check the number.",
    ),
}

GREETINGS: tuple[str, ...] = (
    "Thank you for calling {company} {department}, this is {agent}. ",
    "{company} {department}, {agent} speaking. ",
    "Hi, you've reached {department} at {company}. My name is {agent}. ",
    "Hello, this is {agent} with {company} {department}. ",
    "",
)

# What a prerequisite department does; ``PREREQUISITE_REQUIRED`` uses the infinitive, ``SERVICE_PROVIDED`` the
# past participle (same index).
PREREQUISITE_REASONS: tuple[tuple[str, str], ...] = (
    ("verify your identity", "verified your identity"),
    ("open a case for this request", "opened a case for this request"),
    ("confirm you are the account holder", "confirmed you are the account holder"),
    ("add a note to your account", "added a note to your account"),
    ("clear a hold on your account", "cleared the hold on your account"),
)

_AGENTS = ("Dana", "Marcus", "Priya", "Luis", "Keiko", "Tom", "Abby", "Omar", "Grace", "Victor", "Nadia",
           "Ben")


def join_phrases(phrases: Sequence[str]) -> str:
    """Spoken list: ``a``, ``a and b``, ``a, b and c``.

    >>> join_phrases(["account number", "security PIN", "date of birth"])
    'account number, security PIN and date of birth'
    """
    if len(phrases) <= 1:
        return "".join(phrases)
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def render_reply(rng: np.random.Generator, response_type: str, company: str, department: str,
                 **slots: str) -> str:
    """A CSR reply of ``response_type``: a random greeting (none for recordings) plus a random paraphrase."""
    bits = int(rng.random() * (1 << 52))  # one cheap draw, split into three independent picks
    template_pick, greeting_pick, agent_pick = bits & 0xFFFF, (bits >> 16) & 0xFFFF, bits >> 32
    family = PARAPHRASES[response_type]
    body = family[template_pick % len(family)].format(**slots)
    if response_type == INVALID_NUMBER:
        return body
    greeting = GREETINGS[greeting_pick % len(GREETINGS)]
    agent = _AGENTS[agent_pick % len(_AGENTS)]
    return greeting.format(company=company, department=department, agent=agent) + body
