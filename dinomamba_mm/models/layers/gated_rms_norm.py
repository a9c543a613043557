"""Gated RMSNorm of Mamba-2: RMS normalisation combined with a SiLU gate."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

Tensor = torch.Tensor


def gated_rms_norm(x: Tensor, z: Optional[Tensor], weight: Tensor, eps: float,
                   group_size: int, norm_before_gate: bool) -> Tuple[Tensor, Tensor]:
    """The norm without autograd, one new (..., C) tensor updated in place.

    Args:
        x (Tensor): The input, shape (..., C).
        z (Tensor, optional): The gate, shape (..., C); None for no gate.
        weight (Tensor): The scale, shape (C,).
        eps (float): Added to the mean square before the square root.
        group_size (int): Channels per normalisation group; divides C.
        norm_before_gate (bool): Normalise before gating instead of after.

    Returns:
        Tuple[Tensor, Tensor]: The output (..., C) in x's dtype and the inverse RMS
        (..., C / group_size, 1) in the compute dtype (float32, or float64 for float64 x).
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    if z is not None and not norm_before_gate:
        out = F.silu(z.to(dtype)).mul_(x)
    else:
        out = x.to(dtype, copy=True)
    groups = out.unflatten(-1, (-1, group_size))
    rstd = torch.linalg.vector_norm(groups, dim=-1, keepdim=True).pow_(2)
    groups.mul_(rstd.div_(group_size).add_(eps).rsqrt_())
    out.mul_(weight.to(dtype))
    if z is not None and norm_before_gate:
        out.mul_(F.silu(z.to(dtype)))
    return out.to(x.dtype), rstd


class _GatedRMSNorm(torch.autograd.Function):
    """:func:`gated_rms_norm` with a hand-written backward that keeps only x, z and the inverse
    RMS: the gated product, the normalised values and the SiLU are recomputed (autograd would
    keep four (..., C) tensors)."""

    @staticmethod
    def forward(ctx, x: Tensor, z: Optional[Tensor], weight: Tensor, eps: float,
                group_size: int, norm_before_gate: bool) -> Tensor:
        out, rstd = gated_rms_norm(x, z, weight, eps, group_size, norm_before_gate)
        ctx.save_for_backward(x, z, weight, rstd)
        ctx.options = group_size, norm_before_gate
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, z, weight, rstd = ctx.saved_tensors
        group_size, norm_before_gate = ctx.options
        dtype = rstd.dtype
        xc, w, dout = x.to(dtype), weight.to(dtype), dout.to(dtype)
        gate = None if z is None else F.silu(z.to(dtype))
        gate_first = gate is not None and not norm_before_gate
        normed = xc * gate if gate_first else xc.clone()
        normed.unflatten(-1, (-1, group_size)).mul_(rstd)  # (..., C)
        dz = None
        if gate is not None and norm_before_gate:  # out = normed * w * silu(z)
            dz = torch.ops.aten.silu_backward(dout * normed * w, z.to(dtype))
            dout = dout * gate
        d_weight = torch.linalg.vecdot(dout.reshape(-1, dout.shape[-1]).t(),
                                       normed.reshape(-1, normed.shape[-1]).t())
        dn = (dout * w).unflatten(-1, (-1, group_size))
        grouped = normed.unflatten(-1, (-1, group_size))
        mean = torch.linalg.vecdot(dn, grouped).unsqueeze(-1).div_(group_size)
        dg = torch.addcmul(dn, grouped, mean, value=-1).mul_(rstd).flatten(-2)
        if gate_first:  # normed = x * silu(z) * rstd
            dz = torch.ops.aten.silu_backward(dg * xc, z.to(dtype))
            dg = dg.mul_(gate)
        return (dg.to(x.dtype), None if dz is None else dz.to(z.dtype),
                d_weight.to(weight.dtype), None, None, None)


class GatedRMSNorm(nn.Module):
    """RMSNorm with a SiLU gate, over groups of channels.

    With ``norm_before_gate=False`` (Mamba-2's default, used by DinoVim) the output is
    ``rmsnorm(x * silu(z)) * weight``; with ``True`` it is ``rmsnorm(x) * weight * silu(z)``.
    The root mean square is taken over each group of ``group_size`` consecutive channels
    (one group for ``ngroups=1``). Computed in float32 (float64 for float64 input), returned
    in ``x``'s dtype.

    Args:
        num_channels (int): Number of channels C (the last dimension).
        eps (float): Added to the mean square before the square root. Defaults to 1e-5.
        group_size (int, optional): Channels per normalisation group, a divisor of C; None
            for one group of C. Defaults to None.
        norm_before_gate (bool): Normalise before gating instead of after. Defaults to False.
    """

    def __init__(self,
                 num_channels: int,
                 eps: float = 1e-5,
                 group_size: Optional[int] = None,
                 norm_before_gate: bool = False) -> None:
        super().__init__()
        group_size = num_channels if group_size is None else group_size
        if group_size <= 0 or num_channels % group_size != 0:
            raise ValueError(f'group_size must be a positive divisor of num_channels='
                             f'{num_channels}, got {group_size}')
        self.num_channels = num_channels
        self.eps = eps
        self.group_size = group_size
        self.norm_before_gate = norm_before_gate
        self.weight = nn.Parameter(torch.ones(num_channels))

    def forward(self, x: torch.Tensor, z: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x, z: (..., C) -> (..., C)."""
        if x.shape[-1] != self.num_channels:
            raise ValueError(f'x must have {self.num_channels} channels in its last dim, got '
                             f'shape {tuple(x.shape)}')
        if torch.is_grad_enabled():
            return _GatedRMSNorm.apply(x, z, self.weight, self.eps, self.group_size,
                                       self.norm_before_gate)
        return gated_rms_norm(x, z, self.weight, self.eps, self.group_size,
                              self.norm_before_gate)[0]

    def extra_repr(self) -> str:
        return (f'{self.num_channels}, eps={self.eps}, group_size={self.group_size}, '
                f'norm_before_gate={self.norm_before_gate}')
