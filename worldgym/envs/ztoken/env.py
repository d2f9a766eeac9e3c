"""ZTokenDigits-v1: answer arithmetic by emitting latent Z tokens, then <ANSWER> with 5 digits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from worldgym.action_checks import integer_action
from worldgym.config import check_choice, check_positive_int
from worldgym.envs.ztoken.problems import (
    MAX_ANSWER,
    NUM_DIGITS,
    ArithmeticProblem,
    Operator,
    ProblemSampler,
    Split,
)
from worldgym.envs.ztoken.reward import RewardConfig, score_answer
from worldgym.envs.ztoken.vocab import ZTokenVocab


class ZTokenDigitsEnv(gym.Env[np.ndarray, dict[str, Any]]):
    """Latent-token reasoning over arithmetic problems.

    ## Description
    Each episode poses one problem (``"12*34="``) whose answer has at most 5 digits. The agent reasons only
    with latent tokens: every step emits one of ``<Z_0> ... <Z_{V-1}>`` or ``<ANSWER>``; with ``<ANSWER>`` it
    submits 5 digits (most significant first, leading zeros).

    ## Action Space
    ``Dict({"token": Discrete(V + 1), "digits": MultiDiscrete([10] * 5)})``: ``token < V`` emits
    ``<Z_token>``, ``token == V`` emits ``<ANSWER>``. ``digits`` is read only when the episode ends (scored
    at ``<ANSWER>``, logged at truncation). Actions are checked (``worldgym.action_checks``) before anything
    changes: ``token`` a Python or numpy integer, ``digits`` integers of any integer dtype (list, tuple or
    array). A non-dict action or a float, bool, string or ``None`` value raises ``TypeError``; missing or
    extra keys, a wrong shape or a value out of range raise ``ValueError``. A rejected action leaves the
    episode as it was.

    ## Observation Space
    ``MultiDiscrete([vocab_size] * (max_question_length + max_new_tokens))``: the question token ids
    followed by the Z token ids emitted so far, right-padded with 0. See :class:`ZTokenVocab` for the ids.

    ## Rewards
    Only the last step is rewarded: 1.0 if all digits are right, else ``partial_scale * correct / applied``
    over the positions in a seeded keep-prob mask, minus ``length_penalty`` per generated token. Truncation
    gives ``-length_penalty * max_new_tokens`` (0 with the default penalty of 0), so running out of tokens
    never pays better than a wrong answer.
    The final step's ``info`` holds every term (see :class:`RewardBreakdown`) and ``success`` (every digit
    right, answered with ``<ANSWER>``); earlier steps report ``success=False``.

    ## Episode End
    Terminated at ``<ANSWER>``; truncated after ``max_new_tokens`` tokens without one.

    ## Arguments
    num_z_tokens: V, the number of latent tokens ``<Z_0> ... <Z_{V-1}>``.
    max_new_tokens: tokens per episode before truncation.
    ops: the operators problems use, ``"+"`` and/or ``"*"``.
    operand_digits: digits per operand (the difficulty).
    split: "train" or "test", disjoint by a hash seeded with ``split_seed``.
    split_seed: seed of the split's hash.
    test_fraction: share of problems in the test split.
    partial_scale: scale of the partial credit ``correct / applied`` when some digit is wrong.
    keep_prob: per digit position (most significant first), the probability that a position whose true
        digit is 0 counts towards partial credit (positions with a non-zero digit always count).
    length_penalty: reward subtracted per generated token.
    render_mode: None or "ansi".

    ## Version History
    * v1: truncation is charged ``length_penalty`` per token like an answer is (v0 gave exactly 0; rewards
      with the default ``length_penalty=0`` are unchanged); float digits (``[1.5] * 5`` was scored) and
      other wrong types raise ``TypeError``.
    * v0: initial version, retired: ``gym.make("ZTokenDigits-v0")`` raises Gymnasium's ``DeprecatedEnv``
      naming ZTokenDigits-v1.

    >>> import gymnasium as gym, worldgym
    >>> env = gym.make("ZTokenDigits-v1", num_z_tokens=4, max_new_tokens=3)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step({"token": 4, "digits": [0, 0, 0, 0, 0]})
    >>> terminated, info["terminated_by"]
    (True, 'answer')
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        num_z_tokens: int = 8,
        max_new_tokens: int = 8,
        ops: tuple[Operator, ...] = ("+", "*"),
        operand_digits: int = 2,
        split: Split = "train",
        split_seed: int = 0,
        test_fraction: float = 0.2,
        partial_scale: float = 0.5,
        keep_prob: tuple[float, ...] = (0.02, 0.05, 0.1, 0.5, 1.0),
        length_penalty: float = 0.0,
        render_mode: Literal["ansi"] | None = None,
    ) -> None:
        check_positive_int("max_new_tokens", max_new_tokens)
        check_choice("render_mode", render_mode, [None, "ansi"])
        self.vocab = ZTokenVocab(num_z_tokens)
        self.sampler = ProblemSampler(tuple(ops), operand_digits, split, split_seed, test_fraction)
        self.reward_config = RewardConfig(partial_scale, tuple(keep_prob), length_penalty)
        self.max_new_tokens = max_new_tokens
        self.render_mode = render_mode
        self.observation_length = self.sampler.max_question_length + max_new_tokens
        self.observation_space = spaces.MultiDiscrete(
            np.full(self.observation_length, self.vocab.size, dtype=np.int64), dtype=np.int64
        )
        self.action_space = spaces.Dict(
            {"token": spaces.Discrete(num_z_tokens + 1), "digits": spaces.MultiDiscrete([10] * NUM_DIGITS)}
        )
        self._problem: ArithmeticProblem | None = None
        self._tokens: list[int] = []
        self._generated: list[int] = []
        self._done = True

    @property
    def answer_action(self) -> int:
        """The action ``token`` index that emits ``<ANSWER>``."""
        return self.vocab.num_z_tokens

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.observation_length, dtype=np.int64)
        obs[: len(self._tokens)] = self._tokens
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Draw a problem of this env's split; ``options={"problem": ArithmeticProblem}`` pins one instead.

        A pinned problem is checked before anything changes: a ``TypeError`` or ``ValueError`` leaves the
        current episode as it was.
        """
        problem = (options or {}).get("problem")
        if problem is not None:
            self._check_pinned(problem)
        super().reset(seed=seed)
        self._problem = problem if problem is not None else self.sampler.sample(self.np_random)
        self._tokens = self.vocab.encode_question(self._problem.question)
        self._generated = []
        self._done = False
        return self._observation(), {"question": self._problem.question, "num_generated": 0}

    def _check_pinned(self, problem: Any) -> None:
        """Raise a typed error naming a pinned problem this env cannot pose or score."""
        if not isinstance(problem, ArithmeticProblem):
            raise TypeError(f"options['problem'] must be an ArithmeticProblem, got {type(problem).__name__}")
        question = problem.question
        tokens = self.vocab.encode_question(question)
        if not 0 <= problem.answer <= MAX_ANSWER:
            raise ValueError(
                f"options['problem'] {question!r} has answer {problem.answer}, more than {NUM_DIGITS} digits: "
                f"pin a problem whose answer is in [0, {MAX_ANSWER}]"
            )
        if len(tokens) > self.sampler.max_question_length:
            raise ValueError(
                f"options['problem'] {question!r} is {len(tokens)} characters long; "
                f"operand_digits={self.sampler.operand_digits} allows at most "
                f"{self.sampler.max_question_length}: raise operand_digits or pin a shorter problem"
            )

    def step(self, action: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Emit one token; at ``<ANSWER>`` (or the token limit) score the digits and end the episode."""
        if self._done or self._problem is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        token, digits = self._check_action(action)
        token_id = self.vocab.action_to_id(token)
        self._generated.append(token_id)
        info: dict[str, Any] = {
            "question": self._problem.question,
            "num_generated": len(self._generated),
            "success": False,
        }
        terminated = token == self.answer_action
        truncated = not terminated and len(self._generated) >= self.max_new_tokens
        if not terminated:
            self._tokens.append(token_id)
        reward = 0.0
        if terminated or truncated:
            self._done = True
            breakdown = score_answer(
                digits,
                self._problem.digits,
                len(self._generated),
                "answer" if terminated else "max_new_tokens",
                self.reward_config,
                self.np_random,
            )
            info.update(breakdown.to_dict())
            info["success"] = terminated and breakdown.reward_full == 1.0  # every digit of the answer right
            reward = breakdown.reward_final
        return self._observation(), reward, terminated, truncated, info

    def _check_action(self, action: Any) -> tuple[int, np.ndarray]:
        """The token and digits of an action in the action space, or a typed error naming what is wrong."""
        where = "action is not in the action space"
        if not isinstance(action, Mapping):
            raise TypeError(f"{where} {self.action_space}: expected a dict with keys 'token' and 'digits', "
                            f"got {type(action).__name__}")
        if set(action) != {"token", "digits"}:
            keys = ", ".join(sorted(map(repr, action)))
            raise ValueError(f"{where}: expected exactly the keys 'token' and 'digits', got {keys}")
        token = integer_action(action["token"], f"{where}: action['token']", (), self.vocab.num_z_tokens + 1)
        digits = integer_action(action["digits"], f"{where}: action['digits']", (NUM_DIGITS,), 10)
        return int(token), digits

    def render(self) -> str | None:
        """``"ansi"``: the question and the tokens generated so far."""
        if self.render_mode != "ansi" or self._problem is None:
            return None
        return self._problem.question + self.vocab.decode(self._generated)
