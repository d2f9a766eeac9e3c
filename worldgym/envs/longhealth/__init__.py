"""LongHealthQA-v0: LongHealth-style multiple-choice questions about long clinical documents.

A loader for the LongHealth benchmark's JSON (the user's file), a synthetic panel in the same format
(fictional patients, generated from a seed), patient- or question-level splits, answer parsing and the env.
"""

from worldgym.env_training import register_expert
from worldgym.envs.longhealth.answers import PARSE_METHODS, ParsedAnswer, parse_answer
from worldgym.envs.longhealth.env import LongHealthQAEnv
from worldgym.envs.longhealth.expert import MultipleChoiceExpert
from worldgym.envs.longhealth.loader import load_longhealth, parse_longhealth, patients_to_json
from worldgym.envs.longhealth.prompts import (
    ANSWER_FORMATS,
    CANNOT_ANSWER,
    SYSTEM_PROMPT,
    SYSTEM_PROMPTS,
    build_prompt,
    format_documents,
)
from worldgym.envs.longhealth.schema import OPTION_LETTERS, AnswerLocation, Patient, Question
from worldgym.envs.longhealth.splits import split_questions
from worldgym.envs.longhealth.synthetic import generate_panel, write_panel

register_expert("LongHealthQA-v0", MultipleChoiceExpert)

__all__ = [
    "ANSWER_FORMATS",
    "CANNOT_ANSWER",
    "OPTION_LETTERS",
    "PARSE_METHODS",
    "SYSTEM_PROMPT",
    "SYSTEM_PROMPTS",
    "AnswerLocation",
    "LongHealthQAEnv",
    "MultipleChoiceExpert",
    "ParsedAnswer",
    "Patient",
    "Question",
    "build_prompt",
    "format_documents",
    "generate_panel",
    "load_longhealth",
    "parse_answer",
    "parse_longhealth",
    "patients_to_json",
    "split_questions",
    "write_panel",
]
