"""Pre-norm residual block of DinoVim: RMSNorm -> token mixer -> residual add."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath

from dinomamba_mm.registry import MODELS

#: the paper's mixer (its arguments' defaults are the paper's)
DEFAULT_MIXER = 'dinomamba_mm.BidirectionalMamba2Mixer'


class MambaBlock(nn.Module):
    """``x + drop_path(mixer(norm(x)))`` with the residual stream kept in float32.

    Equal to the paper code's "add -> RMSNorm -> mixer" blocks that carry the residual to the
    next block: its residual after block i is this block's output, its hidden state is the
    mixer output returned alongside.

    Args:
        embed_dims (int): Width D.
        drop_path_rate (float): Stochastic depth on the mixer branch. Defaults to 0.
        norm_eps (float): Epsilon of the RMSNorm. Defaults to 1e-5.
        mixer_cfg (dict, optional): Config of the token mixer, built through the ``MODELS``
            registry with ``embed_dims`` (any registered mixer, :mod:`.token_mixer`); without
            ``type`` the paper's ``BidirectionalMamba2Mixer``. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 drop_path_rate: float = 0.,
                 norm_eps: float = 1e-5,
                 mixer_cfg: Optional[dict] = None) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(embed_dims, eps=norm_eps)
        self.mixer = MODELS.build(
            {'type': DEFAULT_MIXER, **(mixer_cfg or {}), 'embed_dims': embed_dims})
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x: (B, L, D) residual stream -> (new residual float32, mixer output), both (B, L, D)."""
        hidden = self.mixer(self.norm(x.to(self.norm.weight.dtype)))
        return x.float() + self.drop_path(hidden).float(), hidden
