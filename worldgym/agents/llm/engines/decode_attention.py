"""A faster attention function for CPU decoding (one query token behind a long KV cache).

For a one-token query with grouped KV heads, transformers' ``sdpa`` function calls PyTorch's CPU flash kernel
either with ``enable_gqa=True`` (when there is no attention mask) or with the query heads of a group folded
into the query length (``pack_gqa``, when left padding gives a mask). Which layout is faster depends on the
dtype and the CPU (SmolLM2 layer, 16 rows x 3,000 positions, one core; ``benchmarks/decode_attention.py``):
in float32 the folded one everywhere; in bfloat16 the ``enable_gqa`` layout on a CPU with AMX (about 5 ms
against 7 ms folded), but the folded one on a CPU with AVX512-BF16 and no AMX, where ``enable_gqa`` is ~6x
slower (136 ms against 23 ms). This function picks the faster layout for the dtype and CPU whatever the mask
(a fixed rule, so runs on one machine stay deterministic); masks are built exactly as for ``sdpa``.
Everything else (prefill, training, sliding windows, soft-capping, other devices) goes to transformers'
``sdpa`` function unchanged.

Both layouts run the flash kernel, which is tiled for long queries: for a decode step's three queries per KV
head it reads the cache several times slower than the memory allows (SmolLM2 layer, 16 x 3,000 bf16: ~9 ms
against ~1 ms to read the bytes once). With ``compiled=True``, :func:`use_fast_decode_attention` computes the
step instead as :func:`grouped_decode_attention`, a float32 reduction over the keys and one over the values,
which ``torch.compile`` fuses into single passes over the cache views in place (no copy, no expanded heads).
It needs a C++ compiler for inductor: where compiling fails, it warns once and falls back to the flash kernel.
With ``kernel="native"`` the step runs a C++ kernel of the project's own (:mod:`.native_kernel`): one task per
row and KV head that scores the group's queries in one pass over the keys (AVX512-BF16 dot products where the
CPU has them), softmaxes in float32, sums one pass over the values, and skips blocks of positions the mask hides;
and on a CPU with AVX512-BF16 and no AMX, the model's bf16 calls with many query tokens (prefill, and the
learner's passes over the same model, backward included) run the native flash attention
(:mod:`.flash_attention`) instead of ``sdpa``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from peft import PeftModel
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from worldgym.agents.llm.engines.flash_attention import (
    asks_for_extras,
    flash_attention_forward,
    handles_many_tokens,
)
from worldgym.agents.llm.engines.native_kernel import native_kernel
from worldgym.machine import cpu_flags

__all__ = ["COMPILED_DECODE_ATTENTION", "DECODE_ATTENTION_KERNELS", "FAST_DECODE_ATTENTION", "NATIVE_ATTENTION",
           "NATIVE_DECODE_ATTENTION", "compiled_decode_attention_forward", "decode_attention_forward",
           "decode_kernel_of", "folds_query_groups", "grouped_decode_attention", "handles_decode",
           "native_attention_forward", "native_decode_attention_forward", "use_fast_decode_attention"]

FAST_DECODE_ATTENTION = "worldgym_decode"
COMPILED_DECODE_ATTENTION = "worldgym_decode_compiled"
NATIVE_DECODE_ATTENTION = "worldgym_decode_native"
NATIVE_ATTENTION = "worldgym_native"
DECODE_ATTENTION_KERNELS = ("flash", "compiled", "native", "native-decode")
_DTYPES = (torch.float32, torch.bfloat16)


def handles_decode(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float, kwargs: dict[str, Any]) -> bool:
    """Whether :func:`decode_attention_forward` takes its fast path: a one-token query on CPU, in a handled
    dtype, without dropout, gradients, extra biases or windows, and a mask (if any) shared by all heads."""
    if query.device.type != "cpu" or query.shape[2] != 1 or dropout != 0.0:
        return False
    if query.dtype not in _DTYPES or not key.dtype == value.dtype == query.dtype:
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return False
    if asks_for_extras(kwargs):
        return False
    if key.shape[-1] != value.shape[-1] or query.shape[1] % key.shape[1]:
        return False
    return attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1:3] == (1, 1))


def decode_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` ``[B, H, 1, D]``, ``key``/``value``
    ``[B, H_kv, T, D]`` (views of a cache, any strides), a boolean or additive mask ``[B, 1, 1, T]`` or None;
    returns ``([B, 1, H, D], None)`` as ``sdpa_attention_forward`` does, which it defers to off the fast path."""
    if not handles_decode(module, query, key, value, attention_mask, dropout, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    if heads != kv_heads and folds_query_groups(query.dtype):
        folded = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # [B, H_kv, group, D]
        output = F.scaled_dot_product_attention(folded, key, value, attn_mask=attention_mask, scale=scaling)
    else:
        output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                enable_gqa=heads != kv_heads)
    return output.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def grouped_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, scaling: float) -> torch.Tensor:
    """Attention of one-token queries folded by KV group, ``query`` ``[B, H_kv, group, D]`` over ``key``/``value``
    ``[B, H_kv, T, D]`` (any strides) with a boolean or additive mask ``[B, 1, 1, T]`` (or None); scores, softmax
    and sums in float32; returns ``[B, H_kv, group, D]`` in the query's dtype. Written as broadcast products and
    sums so that ``torch.compile`` makes each one pass over the cache; run eagerly it would materialise
    ``[B, H_kv, group, T, D]`` products (use it compiled)."""
    scores = (query.float().unsqueeze(-2) * key.float().unsqueeze(2)).sum(-1) * scaling  # [B, H_kv, group, T]
    if attention_mask is not None:
        scores = (scores.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool
                  else scores + attention_mask)
    probs = scores.softmax(-1)
    return (probs.unsqueeze(-1) * value.float().unsqueeze(2)).sum(-2).to(query.dtype)


_compiled: dict[str, Callable[..., torch.Tensor] | None] = {}


def _compiled_kernel() -> Callable[..., torch.Tensor] | None:
    """:func:`grouped_decode_attention` under ``torch.compile`` (dynamic shapes), made once per process; None
    once compiling has failed."""
    if "kernel" not in _compiled:
        # not from inductor's on-disk graph cache: a kernel cached by another process (other threads, other
        # load) ran at ~1.7x the time of a fresh build of the same graph here, so each process builds its own
        _compiled["kernel"] = torch.compile(grouped_decode_attention, dynamic=True, options={"fx_graph_cache": False})
    return _compiled["kernel"]


def compiled_decode_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                      value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
                                      scaling: float | None = None, is_causal: bool | None = None,
                                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """:func:`decode_attention_forward` with the decode step computed by the compiled
    :func:`grouped_decode_attention` (the flash kernel where compiling failed, after one warning)."""
    kernel = _compiled_kernel()
    if kernel is not None and handles_decode(module, query, key, value, attention_mask, dropout, kwargs):
        batch, heads, _, dim = query.shape
        folded = query.reshape(batch, key.shape[1], heads // key.shape[1], dim)
        try:
            output = kernel(folded, key, value, attention_mask, scaling if scaling is not None else dim ** -0.5)
            return output.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None
        except (RuntimeError, OSError) as error:  # inductor found no working C++ compiler (BackendCompilerFailed)
            _compiled["kernel"] = None
            warnings.warn(f"the compiled decode attention could not be built ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}); decoding with the flash kernel",
                          RuntimeWarning, stacklevel=2)
    return decode_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                    is_causal=is_causal, **kwargs)


def native_decode_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                    value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
                                    scaling: float | None = None, is_causal: bool | None = None,
                                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    """:func:`decode_attention_forward` with the decode step computed by the C++ kernel of
    :mod:`~worldgym.agents.llm.engines.native_kernel` (the flash kernel where it could not be built, after one
    warning). A boolean mask is passed on as an additive float32 one (0 or -inf per position)."""
    kernel = native_kernel()
    if kernel is None or not handles_decode(module, query, key, value, attention_mask, dropout, kwargs):
        return decode_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                        is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    if attention_mask is None:
        additive = query.new_empty(0, dtype=torch.float32)
    elif attention_mask.dtype == torch.bool:
        additive = torch.zeros(attention_mask.shape[0], attention_mask.shape[-1]).masked_fill_(
            ~attention_mask[:, 0, 0], float("-inf"))
    else:
        additive = attention_mask[:, 0, 0].float().contiguous()
    folded = query.reshape(batch, key.shape[1], heads // key.shape[1], dim)
    output = kernel.decode_attention(folded, key, value, additive, scaling if scaling is not None else dim ** -0.5)
    return output.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def native_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """:func:`native_decode_attention_forward`, and calls with many query tokens (prefill, training) computed by
    the native flash attention where it is the faster kernel
    (:mod:`~worldgym.agents.llm.engines.flash_attention`; elsewhere ``sdpa``)."""
    if handles_many_tokens(module, query, key, value, attention_mask, dropout, kwargs):
        return flash_attention_forward(module, query, key, value, attention_mask, scaling=scaling, is_causal=is_causal)
    return native_decode_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                           scaling=scaling, is_causal=is_causal, **kwargs)


def folds_query_groups(dtype: torch.dtype) -> bool:
    """Whether a group's one-token queries are folded into the query length (else ``enable_gqa``): in float32
    always, in bfloat16 unless the CPU has AMX (the only CPU kind where ``enable_gqa`` measured faster)."""
    return dtype != torch.bfloat16 or "amx_bf16" not in cpu_flags()


def _plain_causal(model: PreTrainedModel) -> bool:
    """Whether every layer of ``model`` is plain causal (grouped-query) attention with sdpa-compatible masks."""
    config = model.config
    if config.sub_configs or not getattr(config, "is_causal", True):
        return False
    if not getattr(model, "_supports_attention_backend", False):
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "attn_logit_softcapping", None):
        return False
    return config._attn_implementation in ("sdpa", *(name for name, _ in _KERNELS.values()))


# each kernel's name in transformers' AttentionInterface and its attention function
_KERNELS: dict[str, tuple[str, Callable[..., tuple[torch.Tensor, None]]]] = {
    "flash": (FAST_DECODE_ATTENTION, decode_attention_forward),
    "compiled": (COMPILED_DECODE_ATTENTION, compiled_decode_attention_forward),
    "native": (NATIVE_ATTENTION, native_attention_forward),
    "native-decode": (NATIVE_DECODE_ATTENTION, native_decode_attention_forward),
}


def use_fast_decode_attention(model: PreTrainedModel | PeftModel, kernel: str = "flash") -> bool:
    """Switch ``model`` (plain or PEFT-wrapped) to a decode attention: ``kernel`` is ``"flash"``
    (:func:`decode_attention_forward`), ``"compiled"`` (:func:`compiled_decode_attention_forward`),
    ``"native"`` (:func:`native_attention_forward`: the native decode kernel, and the native flash attention for
    many-token calls where it is the faster kernel) or ``"native-decode"`` (:func:`native_decode_attention_forward`:
    the native decode kernel only); returns whether it did.

    Only a model on ``sdpa`` attention whose layers are all plain causal attention (no sliding windows,
    soft-capping or sub-models) is switched; anything else is left as it is. Outputs equal ``sdpa``'s up to
    the kernel's rounding; prefill and training still run ``sdpa``, except under ``"native"`` on a CPU where the
    native flash attention is the faster kernel (:func:`native_attention_forward`)."""
    if kernel not in _KERNELS:
        raise ValueError(f"decode attention kernel must be one of {DECODE_ATTENTION_KERNELS}, got {kernel!r}")
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    if not _plain_causal(base):
        return False
    name, forward = _KERNELS[kernel]
    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    base.set_attn_implementation(name)
    return base.config._attn_implementation == name


def decode_kernel_of(model: PreTrainedModel | PeftModel) -> str | None:
    """The decode attention kernel ``model`` was switched to (one of :data:`DECODE_ATTENTION_KERNELS`), or None
    when it runs another attention function (e.g. plain ``sdpa``)."""
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    return next((kernel for kernel, (name, _) in _KERNELS.items() if name == base.config._attn_implementation), None)
