"""Pre-norm residual block of DinoVim: RMSNorm -> bidirectional Mamba-2 mixer -> residual add."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath

from .bidirectional_mamba2 import BidirectionalMamba2Mixer


class MambaBlock(nn.Module):
    """``x + drop_path(mixer(norm(x)))`` with the residual stream kept in float32.

    Equal to the paper code's "add -> RMSNorm -> mixer" blocks that carry the residual to the
    next block: its residual after block i is this block's output, its hidden state is the
    mixer output returned alongside.

    Args:
        embed_dims: width D.
        drop_path_rate: stochastic depth on the mixer branch.
        norm_eps: epsilon of the RMSNorm.
        mixer_cfg: keyword arguments of :class:`BidirectionalMamba2Mixer` (besides embed_dims).
    """

    def __init__(self,
                 embed_dims: int,
                 drop_path_rate: float = 0.,
                 norm_eps: float = 1e-5,
                 mixer_cfg: Optional[dict] = None) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(embed_dims, eps=norm_eps)
        self.mixer = BidirectionalMamba2Mixer(embed_dims, **(mixer_cfg or {}))
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x: (B, L, D) residual stream -> (new residual float32, mixer output), both (B, L, D)."""
        hidden = self.mixer(self.norm(x.to(self.norm.weight.dtype)))
        return x.float() + self.drop_path(hidden).float(), hidden
