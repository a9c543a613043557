"""Gated RMSNorm of Mamba-2: RMS normalisation combined with a SiLU gate."""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class GatedRMSNorm(nn.Module):
    """RMSNorm with a SiLU gate, over groups of channels.

    With ``norm_before_gate=False`` (Mamba-2's default, used by DinoVim) the output is
    ``rmsnorm(x * silu(z)) * weight``; with ``True`` it is ``rmsnorm(x) * weight * silu(z)``.
    The root mean square is taken over each group of ``group_size`` consecutive channels
    (one group for ``ngroups=1``). Computed in float32 (float64 for float64 input), returned
    in ``x``'s dtype.

    Args:
        num_channels: number of channels C (the last dimension).
        eps: added to the mean square before the square root.
        group_size: channels per normalisation group; C by default. Must divide C.
        norm_before_gate: normalise before gating instead of after.
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
        compute_dtype = torch.promote_types(x.dtype, torch.float32)
        if not torch.is_grad_enabled():
            return self._forward_in_place(x, z, compute_dtype)
        out = x.to(compute_dtype)
        if z is not None and not self.norm_before_gate:
            out = out * F.silu(z.to(compute_dtype))
        groups = out.unflatten(-1, (-1, self.group_size))
        groups = groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + self.eps)
        out = groups.flatten(-2) * self.weight.to(compute_dtype)
        if z is not None and self.norm_before_gate:
            out = out * F.silu(z.to(compute_dtype))
        return out.to(x.dtype)

    def _forward_in_place(self, x: torch.Tensor, z: Optional[torch.Tensor],
                          compute_dtype: torch.dtype) -> torch.Tensor:
        """The forward without autograd: one new (..., C) tensor, updated in place."""
        gate_first = z is not None and not self.norm_before_gate
        if gate_first:
            out = F.silu(z.to(compute_dtype)).mul_(x)
        else:
            out = x.to(compute_dtype, copy=True)
        groups = out.unflatten(-1, (-1, self.group_size))
        mean_square = torch.linalg.vector_norm(groups, dim=-1, keepdim=True).pow_(2)
        groups.mul_(mean_square.div_(self.group_size).add_(self.eps).rsqrt_())
        out.mul_(self.weight.to(compute_dtype))
        if z is not None and self.norm_before_gate:
            out.mul_(F.silu(z.to(compute_dtype)))
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return (f'{self.num_channels}, eps={self.eps}, group_size={self.group_size}, '
                f'norm_before_gate={self.norm_before_gate}')
