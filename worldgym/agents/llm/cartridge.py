"""``Cartridge``: a trainable KV prefix that stands in for a long text in front of a frozen causal LM.

Each layer gets ``num_tokens`` key and value vectors per KV head, placed in front of the model's cache as if
they were the KV of ``num_tokens`` real tokens at positions ``0..num_tokens-1`` (keys carry their RoPE
rotation, as a real cache does); the real tokens that follow take positions from ``num_tokens`` on. The first
``num_frozen`` tokens are buffers (the attention sink stays fixed); the rest are ``nn.Parameter`` s, the only
tensors ``cartridge.parameters()`` yields. The model itself is never modified: every forward gets a fresh
:class:`~transformers.DynamicCache` built from the tensors (:meth:`Cartridge.past_key_values`), which the model
extends by concatenation, so gradients flow back into the cartridge.

Why not PEFT's ``CartridgeConfig``: its KV lives inside a ``PeftModel`` and is injected only by
``PeftModelForCausalLM.forward`` / ``prepare_inputs_for_generation``. The library's scoring runs the decoder
directly and the engine starts ``generate`` from prefilled caches (shared prompt prefixes, KV reused across
turns), where PEFT injects nothing (it only fills an empty cache); PEFT's forward also passes no position
ids, which shifts left-padded rows, and one model would hold one prompt-learning adapter beside its LoRA
adapters. A separate tensor object works with every path, any number of cartridges per model, and a plain
teacher (the same model without one).

>>> from transformers import Qwen3Config, Qwen3ForCausalLM
>>> config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                      num_attention_heads=4, num_key_value_heads=2, head_dim=8)
>>> model = Qwen3ForCausalLM(config)
>>> cartridge = Cartridge.from_token_ids(model, list(range(10)), num_tokens=6, num_frozen=1)
>>> cartridge.keys.shape  # [layers, kv_heads, tokens, head_dim]
torch.Size([2, 2, 6, 8])
>>> [tuple(p.shape) for p in cartridge.parameters()]  # the trainable tokens only
[(2, 2, 5, 8), (2, 2, 5, 8)]
>>> cartridge.past_key_values(batch_size=3).get_seq_length(), cartridge.nbytes
(6, 1536)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.llm.cache_argument import returned_cache
from worldgym.checkpointing import checkpoint_directory, open_checkpoint, read_json, read_tensors
from worldgym.errors import CartridgeError, CheckpointError

__all__ = ["CARTRIDGE_FORMAT_VERSION", "Cartridge", "ModelFingerprint", "kv_bytes_per_token"]

CARTRIDGE_FORMAT_VERSION = 1
_KIND = "cartridge"
_TENSORS, _METADATA = "cartridge.safetensors", "cartridge.json"
# input-embedding entries recorded to tell checkpoints of one architecture apart (rows 1.., first columns)
_SAMPLE_ROWS, _SAMPLE_COLUMNS = 8, 4
# bf16 keeps 8 significant bits: the same checkpoint loaded in another dtype agrees to this relative tolerance
_SAMPLE_RTOL = 2**-7


def _base(model: PreTrainedModel) -> PreTrainedModel:
    return model.get_base_model() if isinstance(model, PeftModel) else model


@dataclass(frozen=True)
class ModelFingerprint:
    """What a cartridge must match in a model: the architecture and KV shape, plus a few input-embedding
    entries that tell two checkpoints of one shape apart (a fine-tuned copy of the same model may pass).
    ``dtype`` records the model's dtype when the cartridge was made; a model of another dtype is accepted
    (the cartridge is cast to it)."""

    architecture: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    dtype: str
    embedding_sample: tuple[float, ...]

    @classmethod
    def of(cls, model: PreTrainedModel) -> ModelFingerprint:
        """The fingerprint of ``model`` (a transformers causal LM, PEFT-wrapped or not).

        Raises:
            CartridgeError: the model has attention layers other than full attention (sliding windows or
                linear attention would need their own cache layout).
        """
        base = _base(model)
        config = base.config.get_text_config(decoder=True)
        layer_types = getattr(config, "layer_types", None) or []
        other = sorted(set(layer_types) - {"full_attention"})
        if other:
            raise CartridgeError(
                f"{type(base).__name__} has {other} layers; a cartridge supports full-attention layers only"
            )
        heads = config.num_attention_heads
        weight = base.get_input_embeddings().weight
        sample = weight[1 : 1 + _SAMPLE_ROWS, :_SAMPLE_COLUMNS].detach().float().flatten().cpu()
        return cls(
            architecture=type(base).__name__,
            num_layers=int(config.num_hidden_layers),
            num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
            hidden_size=int(config.hidden_size),
            dtype=str(base.dtype).removeprefix("torch."),
            embedding_sample=tuple(float(x) for x in sample),
        )

    def mismatch(self, other: ModelFingerprint) -> str | None:
        """Why a cartridge made for ``self`` cannot serve a model with fingerprint ``other`` (None if it can)."""
        fields = ("architecture", "num_layers", "num_kv_heads", "head_dim", "hidden_size")
        differ = [f"{name} {getattr(self, name)!r} vs {getattr(other, name)!r}" for name in fields
                  if getattr(self, name) != getattr(other, name)]
        if differ:
            return ", ".join(differ)
        mine, theirs = torch.tensor(self.embedding_sample), torch.tensor(other.embedding_sample)
        if mine.shape != theirs.shape or not torch.allclose(mine, theirs, rtol=_SAMPLE_RTOL, atol=1e-6):
            return "same shapes but other weights (the input embeddings differ): another checkpoint"
        return None

    def describe(self) -> str:
        return (f"{self.architecture} ({self.num_layers} layers, {self.num_kv_heads} KV heads of dim "
                f"{self.head_dim}, hidden {self.hidden_size})")


def kv_bytes_per_token(model: PreTrainedModel) -> int:
    """Bytes one token's KV takes in ``model``'s cache at its dtype (every layer, keys and values)."""
    fingerprint = ModelFingerprint.of(model)
    element = torch.empty(0, dtype=_base(model).dtype).element_size()
    return 2 * fingerprint.num_layers * fingerprint.num_kv_heads * fingerprint.head_dim * element


class Cartridge(torch.nn.Module):
    """A trainable KV prefix for one model (see the module docstring).

    Build one with :meth:`from_text` / :meth:`from_token_ids` (the real KV of a text's first tokens, the
    cartridges paper's best initialisation) or :meth:`random`; train ``cartridge.parameters()``; pass it to
    :func:`~worldgym.agents.llm.scoring.score_tokens` and :class:`~worldgym.agents.llm.engines.HFEngine`;
    :meth:`save` / :meth:`load` it.

    Args:
        keys: ``[layers, kv_heads, num_tokens, head_dim]`` keys (RoPE applied, as in a model's cache).
        values: the values, same shape.
        num_frozen: leading tokens kept fixed (0 .. num_tokens).
        fingerprint: the model the KV belongs to.
    """

    def __init__(
        self, keys: torch.Tensor, values: torch.Tensor, num_frozen: int, fingerprint: ModelFingerprint
    ):
        super().__init__()
        expected = (fingerprint.num_layers, fingerprint.num_kv_heads, keys.shape[2], fingerprint.head_dim)
        if keys.ndim != 4 or tuple(keys.shape) != expected or values.shape != keys.shape:
            raise CartridgeError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must both be [layers, kv_heads, "
                f"tokens, head_dim] = {list(expected)} for {fingerprint.describe()}"
            )
        num_tokens = keys.shape[2]
        if num_tokens < 1:
            raise CartridgeError("a cartridge needs at least one token")
        if isinstance(num_frozen, bool) or not isinstance(num_frozen, int) or not 0 <= num_frozen <= num_tokens:
            raise CartridgeError(
                f"num_frozen must be an int in [0, num_tokens={num_tokens}], got {num_frozen!r}"
            )
        self.fingerprint = fingerprint
        self.register_buffer("frozen_keys", keys[:, :, :num_frozen].detach().clone())
        self.register_buffer("frozen_values", values[:, :, :num_frozen].detach().clone())
        self.trainable_keys = torch.nn.Parameter(keys[:, :, num_frozen:].detach().clone())
        self.trainable_values = torch.nn.Parameter(values[:, :, num_frozen:].detach().clone())

    # ------------------------------------------------------------ construction
    @classmethod
    @torch.no_grad()
    def from_token_ids(
        cls, model: PreTrainedModel, token_ids: Sequence[int], num_tokens: int | None = None, num_frozen: int = 1
    ) -> Cartridge:
        """The real KV of the first ``num_tokens`` (default: all) of ``token_ids``, as ``model`` (its active
        adapters included) computes it at positions ``0..num_tokens-1``."""
        num_tokens = len(token_ids) if num_tokens is None else num_tokens
        if num_tokens < 1 or num_tokens > len(token_ids):
            raise CartridgeError(
                f"num_tokens={num_tokens} needs a text of at least that many tokens, got {len(token_ids)} "
                "tokens (use a longer text or a shorter cartridge)"
            )
        fingerprint = ModelFingerprint.of(model)
        base = _base(model)
        ids = torch.tensor([list(token_ids[:num_tokens])], device=base.device)
        was_training = base.training
        base.eval()
        try:
            cache = returned_cache(base.get_decoder()(input_ids=ids, use_cache=True))
        finally:
            base.train(was_training)
        keys = torch.stack([layer.keys[0] for layer in cache.layers])
        values = torch.stack([layer.values[0] for layer in cache.layers])
        return cls(keys, values, num_frozen, fingerprint)

    @classmethod
    def from_text(
        cls,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        text: str,
        num_tokens: int,
        num_frozen: int = 1,
        add_special_tokens: bool = True,
    ) -> Cartridge:
        """The real KV of the first ``num_tokens`` tokens of ``text`` (tokenized as the tokenizer does by
        default, so a model with a BOS token gets it as the first, frozen, attention-sink token)."""
        token_ids = tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        return cls.from_token_ids(model, token_ids, num_tokens, num_frozen)

    @classmethod
    def random(
        cls, model: PreTrainedModel, num_tokens: int, num_frozen: int = 1, seed: int = 0, std: float = 1.0
    ) -> Cartridge:
        """Keys and values drawn from ``N(0, std²)`` with ``seed`` (the caller's RNG is untouched), in the
        model's dtype, on its device."""
        fingerprint = ModelFingerprint.of(model)
        base = _base(model)
        shape = (fingerprint.num_layers, fingerprint.num_kv_heads, num_tokens, fingerprint.head_dim)
        generator = torch.Generator().manual_seed(seed)
        keys, values = (torch.randn(shape, generator=generator) * std for _ in range(2))
        return cls(keys.to(base.device, base.dtype), values.to(base.device, base.dtype), num_frozen, fingerprint)

    # ------------------------------------------------------------ shape
    @property
    def num_tokens(self) -> int:
        return self.frozen_keys.shape[2] + self.trainable_keys.shape[2]

    @property
    def num_frozen(self) -> int:
        return self.frozen_keys.shape[2]

    @property
    def keys(self) -> torch.Tensor:
        """``[layers, kv_heads, num_tokens, head_dim]``, frozen tokens first (differentiable)."""
        return torch.cat([self.frozen_keys, self.trainable_keys], 2)

    @property
    def values(self) -> torch.Tensor:
        return torch.cat([self.frozen_values, self.trainable_values], 2)

    @property
    def nbytes(self) -> int:
        """Bytes of its keys and values (frozen and trainable) at their dtype."""
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return self.frozen_keys, self.frozen_values, self.trainable_keys, self.trainable_values

    # ------------------------------------------------------------ use
    def check_model(self, model: PreTrainedModel) -> None:
        """Raise :class:`~worldgym.errors.CartridgeError` unless ``model`` is the model (architecture, KV shape,
        weights) this cartridge was made for (cheap: the config and a few embedding entries)."""
        problem = self.fingerprint.mismatch(ModelFingerprint.of(model))
        if problem is not None:
            raise CartridgeError(
                f"this cartridge was made for {self.fingerprint.describe()} and does not fit the model it is "
                f"used with ({problem}); make or load a cartridge for this model"
            )

    def past_key_values(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        then: DynamicCache | None = None,
    ) -> DynamicCache:
        """A fresh cache holding the cartridge for ``batch_size`` rows (cast to ``dtype``, moved to ``device``),
        followed by ``then``'s KV when given (same batch size). Gradients reach the trainable tokens. The
        model's attention mask must count ``num_tokens`` leading ones for it, and the following tokens need
        position ids from ``num_tokens`` on."""
        keys, values = self.keys.to(device, dtype), self.values.to(device, dtype)
        layers = []
        for index in range(self.fingerprint.num_layers):
            layer_keys = keys[index].expand(batch_size, -1, -1, -1)
            layer_values = values[index].expand(batch_size, -1, -1, -1)
            if then is not None:
                after = then.layers[index]
                layer_keys = torch.cat([layer_keys, after.keys.to(layer_keys.dtype)], 2)
                layer_values = torch.cat([layer_values, after.values.to(layer_values.dtype)], 2)
            layers.append((layer_keys, layer_values))
        return DynamicCache(ddp_cache_data=layers)

    def positions(self, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention mask ``[B, num_tokens + T]`` and position ids ``[B, T]`` of a (left- or right-)padded
        batch with mask ``attention_mask`` ``[B, T]`` placed after the cartridge: every row sees the cartridge
        and its own tokens, which are numbered from ``num_tokens`` on, as if the cartridge's tokens were real
        ones before them."""
        positions = self.num_tokens + (attention_mask.long().cumsum(1) - 1).clamp(min=0)
        ones = attention_mask.new_ones(attention_mask.shape[0], self.num_tokens)
        return torch.cat([ones, attention_mask], 1), positions

    # ------------------------------------------------------------ save / load
    def tensors(self) -> dict[str, torch.Tensor]:
        """The KV to save (CPU, contiguous): ``keys`` and ``values`` ``[layers, kv_heads, tokens, head_dim]``."""
        return {"keys": self.keys.detach().cpu().contiguous(), "values": self.values.detach().cpu().contiguous()}

    def metadata(self) -> dict[str, Any]:
        """The JSON beside :meth:`tensors`: token counts (the frozen count stored explicitly) and the model's
        fingerprint."""
        return {
            "format_version": CARTRIDGE_FORMAT_VERSION,
            "num_tokens": self.num_tokens,
            "num_frozen": self.num_frozen,
            "dtype": str(self.trainable_keys.dtype).removeprefix("torch."),
            "model": asdict(self.fingerprint),
        }

    @classmethod
    def from_tensors(
        cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any], model: PreTrainedModel | None = None
    ) -> Cartridge:
        """Rebuild a cartridge from :meth:`tensors` and :meth:`metadata` (e.g. kept inside a trainer's
        checkpoint); with ``model``, check it fits and move it to the model's device.

        Raises:
            CheckpointError: the metadata or tensors are malformed or disagree with each other.
            CartridgeError: the cartridge was made for another model.
        """
        try:
            fingerprint = ModelFingerprint(**{**metadata["model"],
                                              "embedding_sample": tuple(metadata["model"]["embedding_sample"])})
            num_tokens, num_frozen = metadata["num_tokens"], metadata["num_frozen"]
            keys, values = tensors["keys"], tensors["values"]
        except (KeyError, TypeError) as error:
            problem = f"cartridge metadata or tensors are malformed: missing or bad {error}"
            raise CheckpointError(problem) from None
        if metadata.get("format_version") != CARTRIDGE_FORMAT_VERSION:
            raise CheckpointError(
                f"cartridge format {metadata.get('format_version')!r}; this worldgym reads format "
                f"{CARTRIDGE_FORMAT_VERSION} only"
            )
        if keys.ndim != 4 or keys.shape[2] != num_tokens:
            raise CheckpointError(
                f"cartridge metadata says {num_tokens} tokens, its keys are {tuple(keys.shape)}"
            )
        try:
            cartridge = cls(keys, values, num_frozen, fingerprint)
        except CartridgeError as error:
            raise CheckpointError(f"cartridge tensors do not match its metadata: {error}") from None
        if model is not None:
            cartridge.check_model(model)
            cartridge.to(_base(model).device)
        return cartridge

    def save(self, path: str | Path) -> Path:
        """Write ``cartridge.safetensors`` and ``cartridge.json`` into folder ``path`` (atomically, with a
        SHA-256 manifest: :mod:`worldgym.checkpointing`)."""
        path = Path(path)
        with checkpoint_directory(path, _KIND, CARTRIDGE_FORMAT_VERSION) as tmp:
            save_file(self.tensors(), str(tmp / _TENSORS), metadata={"format": "pt"})
            (tmp / _METADATA).write_text(json.dumps(self.metadata(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path, model: PreTrainedModel) -> Cartridge:
        """The cartridge :meth:`save` wrote, checked against ``model`` and on its device.

        Raises:
            CheckpointError: the folder is not a complete, intact cartridge.
            CartridgeError: the cartridge was made for another model or KV shape.
        """
        root = open_checkpoint(path, _KIND, CARTRIDGE_FORMAT_VERSION, required=(_TENSORS, _METADATA))
        metadata = read_json(root / _METADATA)
        if not isinstance(metadata, dict):
            raise CheckpointError(f"{root / _METADATA} is corrupt: expected a JSON object")
        return cls.from_tensors(read_tensors(root / _TENSORS), metadata, model)

    def extra_repr(self) -> str:
        return (f"num_tokens={self.num_tokens}, num_frozen={self.num_frozen}, "
                f"model={self.fingerprint.describe()}, {_human(self.nbytes)}")


def _human(nbytes: int) -> str:
    exponent = min(int(math.log(max(nbytes, 1), 1024)), 3)
    return f"{nbytes / 1024**exponent:.1f} {['B', 'KiB', 'MiB', 'GiB'][exponent]}"
