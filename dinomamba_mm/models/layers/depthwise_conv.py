"""Depthwise 1-D convolution along the tokens followed by SiLU, in (B, L, C) layout."""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def _taps(x: torch.Tensor, taps: torch.Tensor, bias: Optional[torch.Tensor], causal: bool,
          out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """out_t = bias + sum_s w_{K-1-s} x_{t-s} (causal) or x_{t+s} (anti-causal), s = 0..K-1.

    x (B, L, C) with contiguous rows of C (a slice of a wider tensor reads as fast as a copy),
    taps (K, C) contiguous (the weight transposed: a strided weight column makes every
    multiply-add ~3x slower), bias (C,) or None; zeros outside the sequence. K multiply-adds on
    shifted slices: a depthwise conv over (B, C, L) is slower on CPU and needs transposes.
    Written into ``out`` (B, L, C) if given.
    """
    length, width = x.shape[1], taps.shape[0]
    if bias is None:
        out = torch.mul(x, taps[width - 1], out=out)
    else:
        out = torch.addcmul(bias, x, taps[width - 1], out=out)
    for shift in range(1, min(width, length)):
        tap = taps[width - 1 - shift]
        if causal:
            out[:, shift:].addcmul_(x[:, :length - shift], tap)
        else:
            out[:, :length - shift].addcmul_(x[:, shift:], tap)
    return out


def _silu_of_taps(x: torch.Tensor, taps: torch.Tensor, bias: Optional[torch.Tensor],
                  causal: Sequence[bool]) -> torch.Tensor:
    """(D, B, L, C): silu(_taps) of x for each of D sets of taps (D, K, C), biases (D, C) and
    directions, into one buffer."""
    out = x.new_empty(len(causal), *x.shape)
    for d, (out_d, causal_d) in enumerate(zip(out, causal)):
        _taps(x, taps[d], None if bias is None else bias[d], causal_d, out=out_d)
        F.silu(out_d, inplace=True)
    return out


class _DepthwiseConvSiLU(torch.autograd.Function):
    """silu(taps(x)) for D sets of weights at once, with a hand-written backward (autograd
    through the in-place taps on slices would copy the whole gradient once per tap) that keeps
    only x, as given (a view of a wider tensor costs no memory of its own), and recomputes the
    pre-activation."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                causal: Tuple[bool, ...]) -> torch.Tensor:
        taps = weight.transpose(1, 2).contiguous()
        ctx.causal = causal
        ctx.save_for_backward(x, taps, bias)
        return _silu_of_taps(x, taps, bias, causal)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, taps, bias = ctx.saved_tensors
        length, width = x.shape[1], taps.shape[1]
        grad_x = None
        grad_taps = torch.empty_like(taps)
        grad_b = torch.empty_like(bias) if bias is not None else None
        for d, causal in enumerate(ctx.causal):
            pre = _taps(x, taps[d], None if bias is None else bias[d], causal)
            grad_pre = torch.ops.aten.silu_backward(grad[d], pre)
            # d out_t / d x_j = w_{K-1-|t-j|} on the causal side: the taps of the other
            # direction
            grad_x_d = _taps(grad_pre, taps[d], None, not causal)
            grad_x = grad_x_d if grad_x is None else grad_x.add_(grad_x_d)
            for shift in range(width):
                if shift >= length:
                    grad_taps[d, width - 1 - shift] = 0
                    continue
                if causal:
                    prod = grad_pre[:, shift:] * x[:, :length - shift]
                else:
                    prod = grad_pre[:, :length - shift] * x[:, shift:]
                grad_taps[d, width - 1 - shift] = prod.sum((0, 1))
            if grad_b is not None:
                grad_b[d] = grad_pre.sum((0, 1))
        return grad_x, grad_taps.transpose(1, 2), grad_b, None


def depthwise_conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                        causal: Union[bool, Sequence[bool]] = True) -> torch.Tensor:
    """SiLU of a depthwise convolution along the tokens, zero padded, output length L; or of D
    such convolutions of the same x at once, into one (D, B, L, C) buffer (e.g. both directions
    of a bidirectional mixer).

    ``causal``: out_t = silu(b + sum_k w_k x_{t-K+1+k}), nn.Conv1d(C, C, K, groups=C) on the
    sequence left-padded with K - 1 zeros; anti-causal: the same conv of the flipped sequence,
    flipped back (out_t reads x_t .. x_{t+K-1}).

    Args:
        x (Tensor): (B, L, C), rows of C contiguous (e.g. a slice of a wider projection; kept
            as it is for the backward pass).
        weight (Tensor): (C, K), e.g. ``conv.weight[:, 0]`` of a depthwise nn.Conv1d; or
            (D, C, K), D of them.
        bias (Tensor, optional): (C,), or (D, C) with a (D, C, K) weight; None for no bias.
        causal (bool | Sequence[bool]): direction of the window; with a (D, C, K) weight, one
            per convolution. Defaults to True.

    Returns:
        (B, L, C) in x's dtype; (D, B, L, C) with a (D, C, K) weight.
    """
    if x.dim() != 3:
        raise ValueError(f'x must have shape (B, L, C), got {tuple(x.shape)}')
    stacked = weight.dim() == 3
    if not stacked:
        if weight.dim() != 2:
            raise ValueError(f'weight must have shape (C, K) with C = {x.shape[2]}, got '
                             f'{tuple(weight.shape)}')
        weight, causal = weight.unsqueeze(0), (bool(causal), )
        bias = bias.unsqueeze(0) if bias is not None else None
    else:
        causal = tuple(causal)
    count = weight.shape[0]
    expected: Tuple[int, ...] = (count, x.shape[2])
    if weight.shape[:2] != expected or len(causal) != count:
        raise ValueError(f'weight must have shape (C, K) or (D, C, K) with C = {x.shape[2]} and '
                         f'D = len(causal), got {tuple(weight.shape)} and causal={causal}')
    if bias is not None and tuple(bias.shape) != expected:
        shape = expected if stacked else expected[1:]
        raise ValueError(f'bias must have shape {shape}, got '
                         f'{tuple(bias.shape if stacked else bias.shape[1:])}')
    weight = weight.to(x.dtype)
    bias = bias.to(x.dtype) if bias is not None else None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (x, weight, bias)):
        out = _DepthwiseConvSiLU.apply(x, weight, bias, causal)
    else:
        out = _silu_of_taps(x, weight.transpose(1, 2).contiguous(), bias, causal)
    return out if stacked else out.squeeze(0)
