"""Cached supervised warm starts: SFT on an env's scripted expert, saved under a key made of the settings.

A warm start is what RL starts from: :func:`load_or_train_warm_start` returns the model and tokenizer of the
run with exactly these settings, training it once (minutes to an hour on CPU) and loading it afterwards.
Expert chats come from the ``"train"`` split only, so no company a validation or test episode uses is seen.
Pretrained models get a LoRA adapter (saved alone); tiny models are built from config and trained in full.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.llm.adapters import peft_deprecation_notices_hidden, seeded_lora
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.loading import tiny_chat_model
from worldgym.agents.llm.models import TINY_SIZES
from worldgym.agents.llm.pretrained import load_chat_model
from worldgym.agents.llm.sft import Chat, ExpertPolicy, SFTConfig, collect_expert_chats, sft_train
from worldgym.checkpointing import (
    FORMAT_VERSION,
    MANIFEST,
    checkpoint_directory,
    open_checkpoint,
    read_json,
    resolve_checkpoint,
)
from worldgym.config import check_field, check_positive_int, check_range
from worldgym.env_training import (
    current_env_id,
    expert_spec,
    has_expert,
    warm_start_env_id,
)
from worldgym.errors import CheckpointError, CheckpointNotFoundError, ConfigError
from worldgym.precision import Precision, check_precision, resolve_dtype

__all__ = [
    "WarmStart", "WarmStartConfig", "demonstrations", "expert_chats", "expert_options", "is_cached",
    "load_or_train_warm_start",
    "read_warm_start_config",
]

_FORMAT_VERSION = 1  # of warm_start.json
WARM_START_KIND = "llm_warm_start"  # the manifest kind of a warm start folder (worldgym.checkpointing)
_RECORD = "warm_start.json"
# names this module exported before experts were registered by their envs: (module, name) of each
_MOVED = {"CSRTextExpert": ("worldgym.envs.csr_phone", "CSRTextExpert"),
          "MultipleChoiceExpert": ("worldgym.envs.longhealth", "MultipleChoiceExpert")}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        module, attribute = _MOVED[name]
        warnings.warn(f"worldgym.agents.llm.warm_start.{name} moved to {module}.{attribute}; envs register their "
                      "experts (worldgym.env_training)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class WarmStartConfig:
    """What a warm start is trained from; every field is part of its cache key.

    Args:
        model: ``"tiny"``/``"small"`` (a Qwen3 built from config, trained in full, with a tokenizer trained
            on the expert chats) or a pretrained model for :func:`load_chat_model` (``"smollm2-135m"``, a local
            path, a hub name), adapted with LoRA.
        env_id: the env whose registered expert (:func:`worldgym.env_training.register_expert`) is imitated.
        env_kwargs: its constructor arguments (``split`` is always ``"train"``).
        difficulties: the difficulty levels of the expert episodes; None: the levels the env's expert
            registered (CSRPhone-v1: 1-3); ``()``: no levels (e.g. LongHealthQA-v0).
        episodes_per_difficulty: expert episodes per difficulty level (in all, when there are no levels).
        epochs: SFT epochs (:class:`SFTConfig`).
        batch_size: SFT batch size.
        learning_rate: SFT learning rate.
        max_length: SFT maximum chat length in tokens.
        lora_rank: the rank of the LoRA adapter of a pretrained model (all linear layers, plus the rows of the
            special tokens added to its vocabulary).
        lora_alpha: its alpha.
        extra_special_tokens: more atomic tokens to reserve (e.g. a world model's markers).
        seed: expert episodes, model init and batch order.
        shared_prefix_tokens: batch chats that open with this many identical tokens together and run their
            common opening once per batch (:class:`SFTConfig`; e.g. questions about one patient's long
            documents); 0: batches of similar length, and a pretrained model's activations recomputed.
        mistake_rate: the share of the expert's turns replaced by a typical mistake that is not trained on, so
            the chats teach recovering from it (only an expert that takes a ``mistake_rate`` option, e.g.
            :class:`~worldgym.envs.csr_phone.CSRTextExpert`).
        continue_from: the key of a cached (or shipped) warm start of the same model to go on training (its
            weights, adapter and tokenizer) on these chats, e.g. the harder difficulties with mistakes; empty:
            start from the model itself.
        dtype: the precision the model is loaded and fine-tuned in ("float32", "bfloat16", "auto";
            :mod:`worldgym.precision`); a trainer may load the result in either precision.
    """

    model: str = "smollm2-135m"
    env_id: str = "CSRPhone-v1"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    difficulties: tuple[int, ...] | None = None
    episodes_per_difficulty: int = 128
    epochs: int = 1
    batch_size: int = 4
    learning_rate: float = 5e-4
    max_length: int = 4096
    lora_rank: int = 16
    lora_alpha: int = 32
    extra_special_tokens: tuple[str, ...] = ()
    seed: int = 0
    shared_prefix_tokens: int = 0
    mistake_rate: float = 0.0
    continue_from: str = ""
    dtype: Precision = "float32"

    def __post_init__(self) -> None:
        check_precision("dtype", self.dtype)
        levels = self.difficulties
        if levels is None:
            levels = expert_spec(self.env_id).difficulties if has_expert(self.env_id) else ()
        object.__setattr__(self, "difficulties", tuple(levels))
        object.__setattr__(self, "extra_special_tokens", tuple(self.extra_special_tokens))
        for name in ("episodes_per_difficulty", "epochs", "batch_size", "lora_rank", "lora_alpha"):
            check_positive_int(name, getattr(self, name))
        check_range("learning_rate", self.learning_rate, 0, None, low_open=True)
        check_range("shared_prefix_tokens", self.shared_prefix_tokens, 0, None)
        check_range("mistake_rate", self.mistake_rate, 0, 1, high_open=True)
        check_field(not self.mistake_rate or (has_expert(self.env_id)
                                              and "mistake_rate" in expert_spec(self.env_id).options),
                    "mistake_rate", self.mistake_rate, f"{self.env_id}'s expert injects no mistakes: use 0")
        check_field("split" not in self.env_kwargs and "difficulty" not in self.env_kwargs, "env_kwargs",
                    self.env_kwargs, "drop 'split' and 'difficulty': expert chats always come from the train "
                    "split, at each of the config's difficulties")

    @property
    def finetune(self) -> Literal["full", "lora"]:
        """Tiny models are trained in full, pretrained ones through a LoRA adapter."""
        return "full" if self.model in TINY_SIZES else "lora"

    def key(self) -> str:
        """A readable cache key: model, env and a hash of every setting (the settings added later only when set,
        so the warm starts cached before them keep their keys; an env's warm start keeps the key of the id its
        expert registered, :attr:`~worldgym.env_training.ExpertSpec.warm_start_id`)."""
        settings = asdict(self)
        settings["env_id"] = warm_start_env_id(self.env_id)
        for name in ("shared_prefix_tokens", "mistake_rate", "continue_from"):
            if not settings[name]:
                del settings[name]
        if settings["dtype"] == "float32":
            del settings["dtype"]
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.model.replace('/', '_')}-{settings['env_id']}-{digest}"


@dataclass
class WarmStart:
    """A loaded warm start: the model (a ``PeftModel`` for pretrained models), its tokenizer, and what its
    training recorded (``summary``: losses, chat count, seconds)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: Path
    summary: dict[str, Any]


def expert_options(env_id: str, seed: int, mistake_rate: float = 0.0) -> dict[str, Any]:
    """The options ``env_id``'s registered expert is made with: ``seed`` where it takes one, and
    ``mistake_rate`` when set."""
    options = {"seed": seed} if "seed" in expert_spec(env_id).options else {}
    return options | ({"mistake_rate": mistake_rate} if mistake_rate else {})


def demonstrations(
    env_id: str,
    env_kwargs: dict[str, Any],
    env_seeds: Sequence[int],
    expert: ExpertPolicy | None = None,
    max_turns: int = 16,
    **options: Any,
) -> list[Chat]:
    """One chat per seed of ``expert`` (default: ``env_id``'s registered text expert made with ``options``) on
    ``make_text_env(env_id, env_kwargs)``: the demonstrations every chat warm start imitates.

    Raises:
        ConfigError: ``env_id`` has no registered expert, or a ``"vector"`` one (the message names the ids
            with one), or the expert takes none of ``options``.
    """
    if expert is None:
        spec = expert_spec(env_id)
        if spec.kind != "text":
            raise ConfigError(f"env_id={env_id!r} is invalid: its expert acts on batched envs ({spec.kind!r}), "
                              "not in text chats; pass expert=")
        expert = spec.build(**options)
    return collect_expert_chats(partial(make_text_env, env_id, env_kwargs), expert, env_seeds, max_turns=max_turns)


def expert_chats(config: WarmStartConfig, expert: ExpertPolicy | None = None) -> list[Chat]:
    """The expert's train-split episodes at each difficulty, as chats (each episode to its end: a tool env's
    within :func:`collect_expert_chats`'s turn limit, an answer env's after its one step); ``expert``: a policy
    to imitate instead of the env's registered one."""
    options = {} if expert is not None else expert_options(config.env_id, config.seed, config.mistake_rate)
    chats: list[Chat] = []
    levels: tuple[int | None, ...] = config.difficulties or (None,)  # () : an env without difficulty levels
    for difficulty in levels:
        kwargs = {**config.env_kwargs, "split": "train"}
        if difficulty is not None:
            kwargs["difficulty"] = difficulty
        first = config.seed * 10**6 + (difficulty or 0) * 10**4
        seeds = range(first, first + config.episodes_per_difficulty)
        chats += demonstrations(config.env_id, kwargs, seeds, expert, **options)
    return chats


# Warm starts shipped inside the package (small tiny-model ones only, so `make demo` needs no SFT); each is the
# output of load_or_train_warm_start with the settings its folder name hashes, and is used when the cache has none.
PACKAGED_WARM_STARTS = Path(__file__).resolve().parents[2] / "assets" / "warm_starts"


def load_or_train_warm_start(
    config: WarmStartConfig,
    cache_dir: str | Path = "runs/warm_starts",
    expert: ExpertPolicy | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    device: str | None = None,
) -> WarmStart:
    """The warm start with these settings, from ``cache_dir/<config.key()>``, else from the package's shipped warm
    starts (:data:`PACKAGED_WARM_STARTS`), else trained (and saved to ``cache_dir``) now, on ``device`` (None:
    where the model loads, the CPU); the device is not part of the settings (the same warm start either way, up
    to float rounding)."""
    path = Path(cache_dir) / config.key()
    folder = _cached_folder(config.key(), Path(cache_dir))
    if folder is not None:
        return _load(folder, config)
    start = time.perf_counter()
    chats = expert_chats(config, expert)
    if config.continue_from:
        base = _load_key(config.continue_from, Path(cache_dir), config.model)
        model, tokenizer = base.model, base.tokenizer
    elif config.finetune == "full":
        corpus = [m["content"] for chat in chats for m in chat.messages]
        corpus += [json.dumps(t) for t in (chats[0].tools or [])]
        tiny = tiny_chat_model(corpus, config.model, seed=config.seed, dtype=config.dtype,
                               extra_special_tokens=config.extra_special_tokens, tool_format="signatures",
                               split_digits=True)
        tokenizer, model = tiny.tokenizer, tiny.model
    else:
        loaded = load_chat_model(config.model, extra_special_tokens=config.extra_special_tokens,
                                 dtype=config.dtype)
        tokenizer = loaded.tokenizer
        model = seeded_lora(loaded.model, config.seed, rank=config.lora_rank, alpha=config.lora_alpha,
                            target_modules=loaded.lora_target_modules,
                            trainable_token_indices=loaded.added_token_ids or None)
    if device is not None:
        model = model.to(device)
    tokens = sum(len(tokenizer.apply_chat_template(c.messages, tools=c.tools, tokenize=True, return_dict=True)
                     ["input_ids"]) for c in chats)
    log(f"warm start {config.key()}: {len(chats)} expert chats, {tokens} tokens")
    losses = sft_train(model, tokenizer, chats, SFTConfig(
        epochs=config.epochs, batch_size=config.batch_size, learning_rate=config.learning_rate,
        max_length=config.max_length, seed=config.seed, progress=progress,
        shared_prefix_tokens=config.shared_prefix_tokens, bucket_by_length=not config.shared_prefix_tokens,
        dtype=config.dtype,
        # a real model's long chats: keep memory bounded (a shared opening runs once per batch instead)
        activation_checkpointing=config.finetune == "lora" and not config.shared_prefix_tokens))
    summary = {"chats": len(chats), "tokens": tokens, "seconds": time.perf_counter() - start,
               "loss_first": losses[0], "loss_last": losses[-1], "losses": losses}
    _save(path, config, model, tokenizer, summary)
    log(f"warm start saved to {path}: loss {losses[0]:.3f} -> {losses[-1]:.3f} in {summary['seconds']:.0f}s")
    return WarmStart(model, tokenizer, path, summary)


def is_cached(config: WarmStartConfig, cache_dir: str | Path = "runs/warm_starts") -> bool:
    """Whether :func:`load_or_train_warm_start` would load ``config``'s warm start (cached or shipped) rather than
    train it."""
    return _cached_folder(config.key(), Path(cache_dir)) is not None


def _save(path: Path, config: WarmStartConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
          summary: dict[str, Any]) -> None:
    """Model (adapter only for LoRA), tokenizer and ``warm_start.json``, saved as one checkpoint: atomically,
    with a SHA-256 manifest (:func:`~worldgym.checkpointing.checkpoint_directory`)."""
    with checkpoint_directory(path, WARM_START_KIND, FORMAT_VERSION) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"format_version": _FORMAT_VERSION, "config": asdict(config), "summary": summary}
        (tmp / _RECORD).write_text(json.dumps(record, indent=1))


def _load_key(key: str, cache_dir: Path, model: str) -> WarmStart:
    """The warm start cached (or shipped) under ``key``, which must be of ``model``."""
    folder = _cached_folder(key, cache_dir)
    if folder is None:
        raise CheckpointNotFoundError(f"continue_from={key!r}: no such warm start in {cache_dir} or among the "
                                      f"shipped ones ({PACKAGED_WARM_STARTS}); train it first")
    saved = _saved_config(read_json(folder / _RECORD))
    if saved.model != model:
        raise ConfigError(f"continue_from={key!r} is invalid: it is a warm start of {saved.model!r}, not of "
                          f"{model!r}")
    return _load(folder, saved)


def _cached_folder(key: str, cache_dir: Path) -> Path | None:
    """The warm start saved under ``key`` in ``cache_dir``, else among the shipped ones, else None (a save
    killed while replacing a folder leaves ``<key>.old``, which counts)."""
    for folder in (cache_dir / key, PACKAGED_WARM_STARTS / key):
        folder = resolve_checkpoint(folder)
        if (folder / _RECORD).is_file():
            return folder
    return None


def _saved_config(record: dict[str, Any]) -> WarmStartConfig:
    """The settings a ``warm_start.json`` records (an env id saved before its version bump as the current id)."""
    saved = record["config"]
    env_id = current_env_id(saved["env_id"])
    return WarmStartConfig(**{**saved, "env_id": env_id, "difficulties": tuple(saved["difficulties"])})


def read_warm_start_config(folder: str | Path) -> WarmStartConfig:
    """The settings of the warm start saved in ``folder`` (its ``warm_start.json``).

    Raises:
        CheckpointNotFoundError: ``folder`` holds no ``warm_start.json``.
    """
    record = Path(folder) / _RECORD
    if not record.is_file():
        raise CheckpointNotFoundError(f"{folder} is not a warm start: it holds no {_RECORD}")
    return _saved_config(read_json(record))


def _load(path: Path, config: WarmStartConfig) -> WarmStart:
    """The warm start in ``path``, its files checked against their manifest (warm starts saved before they had
    one, such as the shipped ones, load unchecked).

    Raises:
        CheckpointError: a file is missing or corrupt, or the folder holds a warm start of other settings.
    """
    if (path / MANIFEST).is_file():
        path = open_checkpoint(path, WARM_START_KIND, FORMAT_VERSION, required=(_RECORD,))
    record = read_json(path / _RECORD)
    if record.get("format_version") != _FORMAT_VERSION:
        raise CheckpointError(f"{path / _RECORD}: warm start format {record.get('format_version')!r}, this "
                              f"worldgym reads format {_FORMAT_VERSION} only (re-create it)")
    saved = _saved_config(record)
    if saved != config:
        raise CheckpointError(f"{path} holds a warm start of other settings: {asdict(saved)}")
    if config.finetune == "full":
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(config.dtype))
    else:
        loaded = load_chat_model(config.model, extra_special_tokens=config.extra_special_tokens,
                                 dtype=config.dtype)
        tokenizer = loaded.tokenizer
        with peft_deprecation_notices_hidden():
            model = PeftModel.from_pretrained(loaded.model, path, is_trainable=True)
    tokenizer.padding_side = "left"
    return WarmStart(model, tokenizer, path, record["summary"])
