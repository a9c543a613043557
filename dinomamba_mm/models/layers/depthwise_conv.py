"""Depthwise 1-D convolution along the tokens followed by SiLU, in (B, L, C) layout."""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def _taps(x: torch.Tensor, taps: torch.Tensor, bias: Optional[torch.Tensor],
          causal: bool) -> torch.Tensor:
    """out_t = bias + sum_s w_{K-1-s} x_{t-s} (causal) or x_{t+s} (anti-causal), s = 0..K-1.

    x (B, L, C) with contiguous rows of C (a slice of a wider tensor reads as fast as a copy),
    taps (K, C) contiguous (the weight transposed: a strided weight column makes every
    multiply-add ~3x slower), bias (C,) or None; zeros outside the sequence. K multiply-adds on
    shifted slices: a depthwise conv over (B, C, L) is slower on CPU and needs transposes.
    """
    length, width = x.shape[1], taps.shape[0]
    if bias is None:
        out = x * taps[width - 1]
    else:
        out = torch.addcmul(bias, x, taps[width - 1])
    for shift in range(1, min(width, length)):
        tap = taps[width - 1 - shift]
        if causal:
            out[:, shift:].addcmul_(x[:, :length - shift], tap)
        else:
            out[:, :length - shift].addcmul_(x[:, shift:], tap)
    return out


class _DepthwiseConvSiLU(torch.autograd.Function):
    """silu(taps(x)) with a hand-written backward (autograd through the in-place taps on
    slices would copy the whole gradient once per tap) that keeps only x, as given (a view of a
    wider tensor costs no memory of its own), and recomputes the pre-activation."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                causal: bool) -> torch.Tensor:
        taps = weight.t().contiguous()
        ctx.causal = causal
        ctx.save_for_backward(x, taps, bias)
        return F.silu(_taps(x, taps, bias, causal), inplace=True)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, taps, bias = ctx.saved_tensors
        grad_pre = torch.ops.aten.silu_backward(grad, _taps(x, taps, bias, ctx.causal))
        # d out_t / d x_j = w_{K-1-|t-j|} on the causal side: the taps of the other direction
        grad_x = _taps(grad_pre, taps, None, not ctx.causal)
        length, width = x.shape[1], taps.shape[0]
        grad_taps = torch.empty_like(taps)
        for shift in range(width):
            if shift >= length:
                grad_taps[width - 1 - shift] = 0
                continue
            if ctx.causal:
                prod = grad_pre[:, shift:] * x[:, :length - shift]
            else:
                prod = grad_pre[:, :length - shift] * x[:, shift:]
            grad_taps[width - 1 - shift] = prod.sum((0, 1))
        grad_b = grad_pre.sum((0, 1)) if bias is not None else None
        return grad_x, grad_taps.t(), grad_b, None


def depthwise_conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                        causal: bool = True) -> torch.Tensor:
    """SiLU of a depthwise convolution along the tokens, zero padded, output length L.

    ``causal``: out_t = silu(b + sum_k w_k x_{t-K+1+k}), nn.Conv1d(C, C, K, groups=C) on the
    sequence left-padded with K - 1 zeros; anti-causal: the same conv of the flipped sequence,
    flipped back (out_t reads x_t .. x_{t+K-1}).

    Args:
        x: (B, L, C), rows of C contiguous (e.g. a slice of a wider projection; kept as it is
            for the backward pass).
        weight: (C, K), e.g. ``conv.weight[:, 0]`` of a depthwise nn.Conv1d.
        bias: (C,) or None.
        causal: direction of the window.

    Returns:
        (B, L, C) in x's dtype.
    """
    if x.dim() != 3:
        raise ValueError(f'x must have shape (B, L, C), got {tuple(x.shape)}')
    expected: Tuple[int, ...] = (x.shape[2], )
    if weight.dim() != 2 or weight.shape[:1] != expected:
        raise ValueError(f'weight must have shape (C, K) with C = {x.shape[2]}, got '
                         f'{tuple(weight.shape)}')
    if bias is not None and tuple(bias.shape) != expected:
        raise ValueError(f'bias must have shape (C,) = {expected}, got {tuple(bias.shape)}')
    weight = weight.to(x.dtype)
    bias = bias.to(x.dtype) if bias is not None else None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (x, weight, bias)):
        return _DepthwiseConvSiLU.apply(x, weight, bias, causal)
    return F.silu(_taps(x, weight.t().contiguous(), bias, causal), inplace=True)
