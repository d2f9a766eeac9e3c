"""Attention over many query tokens (training passes, prefill) in bf16 on CPU with the project's C++ kernel.

On a CPU with AVX512-BF16 but no AMX, PyTorch's CPU flash kernel computes its bf16 products with float32 matrix
products (MKL's sgemm) and runs the learner's causal attention several times slower than bf16 dot products
allow: a SmolLM2 layer's forward and backward at 3,072 tokens took as long as the rest of the layer
(``benchmarks/flash_attention.py``). :func:`flash_attention` computes the same attention with
``flash_attention_kernel.cpp`` (built once per machine by :mod:`.native_kernel`): blocks of queries against
blocks of keys, bf16 products summed in float32, a running float32 softmax, no ``[T, S]`` matrix stored, and
blocks the causal rule or the padding hides skipped; its backward recomputes the scores block by block from
the saved log-sum-exp. Where PyTorch's kernel is the faster one (a CPU with AMX, whose bf16 products it uses)
or the dtype is not bf16, callers keep ``sdpa`` (:func:`handles_many_tokens`).
"""

from __future__ import annotations

from typing import Any

import torch

from worldgym.agents.llm.engines.native_kernel import native_kernel, vector_flags
from worldgym.machine import cpu_flags

__all__ = ["asks_for_extras", "flash_attention", "flash_attention_forward", "handles_many_tokens",
           "native_flash_attention_is_faster"]

_EXTRAS = ("softcap", "sliding_window", "position_bias", "s_aux", "sinks")


def asks_for_extras(kwargs: dict[str, Any]) -> bool:
    """Whether an attention call's keyword arguments ask for more than plain attention (soft-capping, a sliding
    window, a position bias, attention sinks, returned weights), which the native kernels do not compute."""
    return any(kwargs.get(name) is not None for name in _EXTRAS) or bool(kwargs.get("output_attentions"))


class _FlashAttention(torch.autograd.Function):
    """The kernel's forward and backward as one autograd node (it saves the inputs, output and log-sum-exp)."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                causal: bool, scaling: float) -> torch.Tensor:
        out, lse = _kernel().forward(query, key, value, mask, causal, scaling)
        ctx.save_for_backward(query, key, value, out, lse, mask)
        ctx.causal, ctx.scaling = causal, scaling
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        query, key, value, out, lse, mask = ctx.saved_tensors
        grad_query, grad_key, grad_value = _kernel().backward(
            grad_out, query, key, value, out, lse, mask, ctx.causal, ctx.scaling)
        return grad_query, grad_key, grad_value, None, None, None


def _kernel() -> Any:
    kernel = native_kernel("flash_attention")
    if kernel is None:
        raise RuntimeError("the native flash attention kernel could not be built (see the earlier warning)")
    return kernel


def flash_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
                    causal: bool = False, scaling: float | None = None) -> torch.Tensor:
    """Grouped-query attention of bf16 ``query`` ``[B, H, T, D]`` over ``key``/``value`` ``[B, H_kv, S, D]``
    (views with any strides but the last; ``H`` a multiple of ``H_kv``, ``D`` of 32, ``T <= S``), differentiable.

    ``mask``: bool ``[B or 1, 1, T, S]`` (True = attend) or None. ``causal``: query ``t`` also sees no key after
    position ``t + S - T`` (the queries are the last ``T`` positions). A query that sees no key gets zeros.
    Returns ``[B, T, H, D]`` (transformers' attention-output layout), bf16.

    Raises:
        RuntimeError: the kernel could not be built on this machine, or the inputs do not fit it (its message
            names the mismatch).
    """
    flags = torch.empty(0, dtype=torch.bool) if mask is None else mask
    if flags.numel() and flags.stride(-1) != 1:
        flags = flags.contiguous()
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    return _FlashAttention.apply(query, key, value, flags, causal, scale)


def native_flash_attention_is_faster() -> bool:
    """Whether this CPU runs bf16 attention faster with the native kernel than with PyTorch's: it has AVX512-BF16
    dot products and no AMX (which PyTorch's kernel uses where present)."""
    flags = cpu_flags()
    return vector_flags(flags)[0] == "avx512bf16" and "amx_bf16" not in flags


def handles_many_tokens(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, dropout: float, kwargs: dict[str, Any]) -> bool:
    """Whether an attention call with these arguments (transformers' attention-function signature) can run
    :func:`flash_attention`: more than one bf16 query token on CPU, no dropout, windows or extra biases, a
    boolean mask or none (then plain causal attention over as many keys as queries), head shapes the kernel
    takes, and a CPU where the native kernel is the faster one."""
    if query.device.type != "cpu" or query.shape[2] < 2 or dropout != 0.0:
        return False
    if not query.dtype == key.dtype == value.dtype == torch.bfloat16:
        return False
    if asks_for_extras(kwargs):
        return False
    heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[-1]
    if heads % kv_heads or dim % 32 or key.shape[-1] != dim or value.shape != key.shape:
        return False
    if any(t.stride(-1) != 1 for t in (query, key, value)):
        return False
    queries, keys = query.shape[2], key.shape[2]
    if attention_mask is None:
        if queries != keys:  # transformers aligns an unmasked causal prefill to the top left there: keep sdpa's
            return False
    elif not (attention_mask.dtype == torch.bool and attention_mask.dim() == 4 and attention_mask.shape[1] == 1
              and attention_mask.shape[2] == queries and attention_mask.shape[3] >= keys
              and attention_mask.shape[0] in (1, query.shape[0])):
        return False
    return native_flash_attention_is_faster() and native_kernel("flash_attention") is not None


def flash_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None,
                            is_causal: bool | None = None) -> tuple[torch.Tensor, None]:
    """transformers' attention-function result for a call :func:`handles_many_tokens` accepted: causal exactly
    where ``sdpa_attention_forward`` would be (no mask and the module is causal)."""
    causal = attention_mask is None and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    mask = None if attention_mask is None else attention_mask[..., : key.shape[2]]
    return flash_attention(query, key, value, mask, causal=bool(causal), scaling=scaling), None
