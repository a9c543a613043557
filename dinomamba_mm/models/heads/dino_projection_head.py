"""DINO projection head: MLP -> L2 normalisation -> weight-normalised linear layer."""
from typing import Optional

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from dinomamba_mm.argument_checks import check_bool, check_int
from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class DINOProjectionHead(BaseModule):
    """Projection head of DINO, shared in design by student and teacher.

    ``in_channels -> hidden -> GELU -> ... -> bottleneck`` (``num_layers`` linear layers, GELU
    between them), then the bottleneck vector is L2-normalised and fed to a weight-normalised
    linear layer without bias (``last_layer``: ``W = g * V / ||V||`` row-wise) that produces the
    ``out_channels`` prototype scores.

    The magnitude ``g`` starts at 1. With ``norm_last_layer=True`` it stays fixed at 1
    (``requires_grad=False``, so optimizers never see it) and every prototype row has unit
    norm, which stabilises training.

    Parameter names: ``mlp.*`` and ``last_layer.parametrizations.weight.original0`` (``g``,
    shape (out_channels, 1)) / ``...original1`` (``V``, shape (out_channels, bottleneck)).
    The freeze-last-layer schedule targets the module ``last_layer``.

    Args:
        in_channels (int): Feature size of the backbone output (C).
        out_channels (int): Number of prototypes K. Defaults to 65536.
        hidden_channels (int): Width of the hidden layers. Defaults to 2048.
        bottleneck_channels (int): Width of the last MLP layer. Defaults to 256.
        num_layers (int): Number of linear layers in the MLP (>= 1). Defaults to 3.
        norm_last_layer (bool): Fix ``g`` of the last layer at 1. Defaults to True.
        init_cfg (dict, optional): mmengine init config. Defaults to None, which applies
            DINO's initialisation (truncated normal std 0.02, zero bias) in ``__init__``.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int = 65536,
                 hidden_channels: int = 2048,
                 bottleneck_channels: int = 256,
                 num_layers: int = 3,
                 norm_last_layer: bool = True,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        for name, value in (('in_channels', in_channels), ('out_channels', out_channels),
                            ('hidden_channels', hidden_channels),
                            ('bottleneck_channels', bottleneck_channels),
                            ('num_layers', num_layers)):
            check_int(name, value, 1)
        check_bool('norm_last_layer', norm_last_layer)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.norm_last_layer = norm_last_layer

        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [bottleneck_channels]
        layers = []
        for i in range(num_layers):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i < num_layers - 1:
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                trunc_normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)

        self.last_layer = weight_norm(
            nn.Linear(bottleneck_channels, out_channels, bias=False))
        magnitude = self.last_layer.parametrizations.weight.original0
        with torch.no_grad():
            magnitude.fill_(1.0)
        magnitude.requires_grad_(not norm_last_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Project features to prototype scores.

        Args:
            x (Tensor): (B, C) features.

        Returns:
            Tensor: (B, K) scores, K = ``out_channels``.
        """
        if x.dim() != 2 or x.shape[1] != self.in_channels:
            raise ValueError(f'x must have shape (B, {self.in_channels}), '
                             f'got {tuple(x.shape)}')
        x = self.mlp(x)
        x = F.normalize(x, dim=-1, p=2)
        return self.last_layer(x)
