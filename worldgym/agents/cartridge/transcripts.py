"""The cartridge distiller's evaluation transcripts (:mod:`worldgym.transcripts`): each held-out question with the
frozen model's greedy answers with no documents, with the cartridge and with the documents in context."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from worldgym.agents.llm.rollout import Episode

__all__ = ["question_record"]

# the env's step info a transcript keeps, under the record's names (LongHealthQA's parsed choice and how it read it)
_INFO_KEYS = {"predicted": "choice", "parse": "parse"}


def question_record(index: int, none: Episode, cartridge: Episode, teacher: Episode,
                    tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """One transcript line: the ``question`` and its ``correct`` option (from the env's reset info), the
    cartridge's ``reward`` and ``success``, and ``messages``: the prompt as the student reads it, then the three
    answers as ``assistant`` messages labelled by ``view`` ("no documents", "documents" (the teacher),
    "cartridge", last), each with its ``choice`` as the env parsed it, ``success`` and ``reward``."""
    messages: list[dict[str, Any]] = [
        {"role": "prompt", "content": tokenizer.decode(cartridge.token_ids[:cartridge.prompt_length])}]
    messages += [_answer(view, episode) for view, episode in
                 (("no documents", none), ("documents", teacher), ("cartridge", cartridge))]
    return {
        "episode": index, "env_seed": cartridge.env_seed, "question": cartridge.reset_info.get("question"),
        "correct": cartridge.reset_info.get("answer"), "reward": cartridge.reward,
        "success": bool(cartridge.success), "num_turns": len(cartridge.turns), "messages": messages,
    }


def _answer(view: str, episode: Episode) -> dict[str, Any]:
    turn = episode.turns[0] if episode.turns else None
    message: dict[str, Any] = {"role": "assistant", "view": view, "content": turn.action if turn else ""}
    if turn is not None:
        message |= {name: turn.info[key] for key, name in _INFO_KEYS.items() if key in turn.info}
    return message | {"success": bool(episode.success), "reward": episode.reward}
