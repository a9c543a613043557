"""LinearViT: mmpretrain's VisionTransformer with phi(Q) phi(K)^T attention (paper's LinearViT)."""
from typing import Dict, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmpretrain.models.backbones import VisionTransformer

from dinomamba_mm.registry import MODELS
from ..layers import LinearMultiheadAttention


@MODELS.register_module()
class LinearViT(VisionTransformer):
    """Vision Transformer whose attention is linear: phi(Q) (phi(K)^T V), phi = row softmax.

    Everything but the attention is mmpretrain's ``VisionTransformer`` (same arguments, outputs
    ``out_type`` / ``out_indices``, ``frozen_stages``, ``final_norm``, ``get_layer_depth``, and
    parameter names, so ViT checkpoints load). Each layer's ``attn`` is a
    :class:`LinearMultiheadAttention` built with the layer's own settings.

    Args:
        arch: any of ViT's names ('base' 86M parameters with the 224 position embedding,
            'small' = ViT's 768-wide 8-layer model, 'deit-small' = DINO's ViT-S/16, ...), plus
            'tiny' / 't' = ViT-T/16 (192 wide, 12 layers, 3 heads), or a custom dict.
        norm_eval: keep the LayerNorms in eval mode during training.
        attn_drop_rate: must be 0 (there is no attention matrix to drop).
        **kwargs: ``VisionTransformer``'s arguments.

    Analysis: :meth:`phi_qk` returns phi(Q), phi(K) per head of chosen layers.
    """
    arch_zoo = {
        **VisionTransformer.arch_zoo,
        **dict.fromkeys(['t', 'tiny'], {
            'embed_dims': 192,
            'num_layers': 12,
            'num_heads': 3,
            'feedforward_channels': 192 * 4
        }),
    }

    def __init__(self, *args, norm_eval: bool = False, attn_drop_rate: float = 0.,
                 **kwargs) -> None:
        if attn_drop_rate:
            raise ValueError(f'attn_drop_rate must be 0 for linear attention, got '
                             f'{attn_drop_rate}')
        super().__init__(*args, **kwargs)
        self.norm_eval = norm_eval
        self._use_linear_attention(kwargs)
        if self.frozen_stages > 0:
            self._freeze_stages()

    def _use_linear_attention(self, kwargs: dict) -> None:
        """Replace each layer's softmax attention by linear attention with the same settings."""
        layer_cfgs = kwargs.get('layer_cfgs', dict())
        if isinstance(layer_cfgs, dict):
            layer_cfgs = [layer_cfgs] * self.num_layers
        dpr = np.linspace(0, kwargs.get('drop_path_rate', 0.), self.num_layers)
        for i, layer in enumerate(self.layers):
            cfg = dict(
                embed_dims=self.embed_dims,
                num_heads=self.arch_settings['num_heads'],
                drop_rate=kwargs.get('drop_rate', 0.),
                drop_path_rate=dpr[i],
                qkv_bias=kwargs.get('qkv_bias', True),
                layer_scale_init_value=kwargs.get('layer_scale_init_value', 0.))
            cfg.update(layer_cfgs[i])
            if cfg.get('attn_drop_rate', 0.):
                raise ValueError(f'layer_cfgs[{i}] attn_drop_rate must be 0 for linear '
                                 f'attention, got {cfg["attn_drop_rate"]}')
            layer.attn = LinearMultiheadAttention(
                embed_dims=cfg['embed_dims'],
                num_heads=cfg['num_heads'],
                proj_drop=cfg['drop_rate'],
                dropout_layer=dict(type='DropPath', drop_prob=cfg['drop_path_rate']),
                qkv_bias=cfg['qkv_bias'],
                layer_scale_init_value=cfg['layer_scale_init_value'])

    def train(self, mode: bool = True) -> 'LinearViT':
        super().train(mode)
        if mode and self.frozen_stages > 0:
            self.drop_after_pos.eval()
            self.patch_embed.eval()
            for layer in self.layers[:self.frozen_stages]:
                layer.eval()
            if self.frozen_stages == self.num_layers and self.final_norm:
                self.ln1.eval()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, nn.LayerNorm):
                    module.eval()
        return self

    @torch.no_grad()
    def phi_qk(self, inputs: torch.Tensor,
               layer_indices: Sequence[int]) -> Dict[int, Tuple[torch.Tensor, torch.Tensor]]:
        """phi(Q), phi(K) of chosen layers for images ``inputs`` (B, 3, H, W).

        Returns:
            {layer index: (phi_q, phi_k)}, each (B, heads, L, head_dims) over the full sequence
            (class token first).
        """
        wanted = sorted({i + self.num_layers if i < 0 else i for i in layer_indices})
        if not wanted or wanted[0] < 0 or wanted[-1] >= self.num_layers:
            raise ValueError(f'layer_indices {list(layer_indices)} out of range for '
                             f'{self.num_layers} layers')
        x, patch_resolution = self.patch_embed(inputs)
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.resize_pos_embed(self.pos_embed, self.patch_resolution, patch_resolution,
                                      mode=self.interpolate_mode,
                                      num_extra_tokens=self.num_extra_tokens)
        x = self.pre_norm(self.drop_after_pos(x))
        maps = {}
        for i, layer in enumerate(self.layers[:wanted[-1] + 1]):
            if i in wanted:
                maps[i] = layer.attn.feature_maps(layer.ln1(x))
            x = layer(x)
        return maps
