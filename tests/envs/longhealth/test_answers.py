"""Reading the chosen option from a reply: answer tags first, then the documented fallbacks, in order."""

from __future__ import annotations

import pytest

from worldgym.envs.longhealth import CANNOT_ANSWER, PARSE_METHODS, ParsedAnswer, parse_answer

OPTIONS = {"A": "a fall at home", "B": "unfractionated heparin", "C": "morphine", "D": "insulin glargine",
           "E": "warfarin"}
WITH_F = {**OPTIONS, "F": CANNOT_ANSWER}


@pytest.mark.parametrize("reply, letter, method", [
    ("<answer>C</answer>", "C", "tag"),
    ("Reasoning first.\n<answer> (d) </answer>", "D", "tag"),
    ("<answer>C: morphine</answer>", "C", "tag"),
    ("<answer>Option E</answer>", "E", "tag"),
    ("<ANSWER>Insulin  Glargine.</ANSWER>", "D", "tag"),  # an option's text, ignoring case and spacing
    ("<answer>A fall at home</answer>", "A", "tag"),  # the text wins over reading "A" as a letter
    ("<answer>B</answer> no wait <answer>C</answer>", "C", "tag"),  # the last tag counts
    ("The answer is <answer>E", "E", "tag"),  # a reply cut off inside the tag
    ("<answer>unfractioned heparine</answer>", "B", "tag_closest_text"),
    ("<answer>A fall</answer>", "A", "tag_closest_text"),  # "A" followed by text is not a letter
    ("The correct answer is D: insulin glargine.", "D", "letter"),
    ("Answer: (B)", "B", "letter"),
    ("I considered option A, but the answer is C.", "C", "letter"),
    ("<answer></answer> Answer: E", "E", "letter"),  # an empty tag falls through
    (" B ", "B", "letter"),
    ("It must be morphine, given the pain.", "C", "option_text"),
    ("warfarn", "E", "closest_text"),
    ("the answer is a bit unclear", None, "none"),  # a lower-case "a" is not a stated letter
    ("Morphine or warfarin, hard to say.", None, "none"),  # two options' texts: no single one
    ("", None, "none"),
    ("x" * 100_000, None, "none"),
])
def test_replies_are_read_by_the_first_rule_that_decides(reply, letter, method):
    assert parse_answer(reply, OPTIONS) == ParsedAnswer(letter, method)
    assert method in PARSE_METHODS


def test_letters_outside_the_options_never_match():
    assert parse_answer("<answer>F</answer>", OPTIONS) == ParsedAnswer(None, "none")
    assert parse_answer("<answer>F</answer>", WITH_F) == ParsedAnswer("F", "tag")
    assert parse_answer("The answer is F.", WITH_F) == ParsedAnswer("F", "letter")
    assert parse_answer("<answer>It cannot be answered from the documents</answer>", WITH_F).letter == "F"


def test_the_cutoff_and_ties_decide_fuzzy_matches():
    assert parse_answer("<answer>morphium</answer>", OPTIONS).letter == "C"
    assert parse_answer("<answer>morphium</answer>", OPTIONS, cutoff=0.95) == ParsedAnswer(None, "none")
    tied = {"A": "drug one", "B": "drug two"}
    assert parse_answer("<answer>drug</answer>", tied) == ParsedAnswer(None, "none")
