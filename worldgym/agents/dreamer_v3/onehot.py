"""Linear layers over one-hot inputs: gather the active weight columns instead of multiplying by zeros.

The 32x32 stochastic state is 1024 one-hot columns with 32 ones, so ``W @ [one_hot(z), h]`` costs a dense
1024-wide matmul of which 97% multiplies zeros. :func:`one_hot_linear` computes the same sum by gathering the
32 active columns (``F.embedding_bag``) and backpropagates to the weight with a sparse-dense matmul. The
result equals the dense layer up to floating-point summation order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def autocast_dtype(device_type: str) -> torch.dtype:
    """The dtype matrix products compute in on ``device_type`` here: autocast's, else float32."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.float32


def _transposed(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weight.t()`` as a contiguous ``dtype`` tensor (one copy)."""
    if dtype == weight.dtype:
        return weight.t().contiguous()
    return weight.t().to(dtype, memory_format=torch.contiguous_format)


class _GatherColumns(torch.autograd.Function):
    """``weight [U, K]``, ``index [M, G]`` -> ``[M, U]``: the sum of the ``G`` indexed columns per row.

    ``one_hot [M, K]`` (optional) is the dense multi-hot tensor the indices describe; it only receives the
    input gradient (``grad @ weight``), e.g. to pass it on through a straight-through sample. Under autocast
    the columns are gathered from a copy of ``weight`` in the autocast dtype (sums accumulate in float32);
    gradients are computed in ``weight``'s dtype.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, weight: torch.Tensor, index: torch.Tensor, one_hot: torch.Tensor | None
    ) -> torch.Tensor:
        ctx.save_for_backward(weight, index)
        return F.embedding_bag(index, _transposed(weight, autocast_dtype(weight.device.type)), mode="sum")

    @staticmethod
    def backward(  # type: ignore[override]
        ctx, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, None, torch.Tensor | None]:
        weight, index = ctx.saved_tensors
        grad = grad.to(weight.dtype).contiguous()
        grad_weight = grad_one_hot = None
        if ctx.needs_input_grad[0]:
            rows, groups = index.shape
            row_ids = torch.arange(rows, device=index.device).repeat_interleave(groups)
            pattern = torch.sparse_coo_tensor(  # the multi-hot input, transposed: [K, M]
                torch.stack((index.flatten(), row_ids)),
                torch.ones(rows * groups, dtype=grad.dtype, device=grad.device),
                (weight.shape[1], rows),
                check_invariants=False,
            )
            grad_weight = torch.sparse.mm(pattern, grad).t()
        if ctx.needs_input_grad[2]:
            grad_one_hot = grad @ weight
        return grad_weight, None, grad_one_hot


def one_hot_columns(classes: torch.Tensor, discrete: int) -> torch.Tensor:
    """Class indices ``[..., S]`` -> their columns in the flat ``S * D`` one-hot vector (``s*D + class``)."""
    offsets = torch.arange(classes.shape[-1], device=classes.device, dtype=classes.dtype) * discrete
    return classes + offsets


def multi_hot(columns: torch.Tensor, width: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Dense ``[..., width]`` vector with ones at ``columns [..., G]`` (the inverse of gathering)."""
    out = torch.zeros(*columns.shape[:-1], width, dtype=dtype, device=columns.device)
    return out.scatter_(-1, columns, 1.0)


def one_hot_linear(
    linear: nn.Linear,
    columns: torch.Tensor,
    dense: torch.Tensor | None = None,
    one_hot: torch.Tensor | None = None,
) -> torch.Tensor:
    """``linear(cat((multi_hot(columns), dense), -1))`` without building the one-hot block.

    Args:
        linear (nn.Linear): layer whose first ``in_features - dense_width`` inputs are one-hot.
        columns (torch.Tensor): ``[..., G]`` int64 positions of the ones among those inputs.
        dense (torch.Tensor | None): ``[..., dense_width]`` remaining (dense) inputs, or None.
        one_hot (torch.Tensor | None): ``[..., K]`` the one-hot inputs as a dense tensor with a graph (a
            straight-through sample): its value is taken to equal ``multi_hot(columns)`` and it receives the
            input gradient.
    """
    lead = columns.shape[:-1]
    dense_width = 0 if dense is None else dense.shape[-1]
    sparse_width = linear.in_features - dense_width
    flat_one_hot = None if one_hot is None else one_hot.reshape(-1, sparse_width)
    out = _GatherColumns.apply(
        linear.weight[:, :sparse_width], columns.reshape(-1, columns.shape[-1]), flat_one_hot
    )
    if dense is not None:
        flat, weight = dense.reshape(-1, dense_width), linear.weight[:, sparse_width:].t()
        if torch.is_autocast_enabled(flat.device.type):
            out = torch.addmm(out, flat, weight)  # autocast runs it in the lower precision
        else:
            out = out.addmm_(flat, weight)  # no copy
    if linear.bias is not None:
        out = out + linear.bias.to(out.dtype)
    return out.view(*lead, linear.out_features)


def one_hot_mlp(
    net: nn.Sequential,
    columns: torch.Tensor,
    dense: torch.Tensor | None = None,
    one_hot: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run ``net`` (first module an ``nn.Linear``) on ``cat((multi_hot(columns), dense))``; see
    :func:`one_hot_linear` for ``one_hot``."""
    first, *rest = net
    if not isinstance(first, nn.Linear):
        raise TypeError(f"one_hot_mlp needs a network starting with nn.Linear, got {type(first).__name__}")
    x = one_hot_linear(first, columns, dense, one_hot)
    for layer in rest:
        x = layer(x)
    return x
