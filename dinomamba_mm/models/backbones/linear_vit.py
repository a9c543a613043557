"""LinearViT: mmpretrain's VisionTransformer with phi(Q) phi(K)^T attention (paper's LinearViT)."""
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from mmpretrain.models.backbones import VisionTransformer

from dinomamba_mm.argument_checks import check_argument, check_bool, check_indices, is_int
from dinomamba_mm.checkpoints import GRID_METADATA_KEY, checked_pretrained_cfg
from dinomamba_mm.registry import MODELS
from ..layers import LinearMultiheadAttention, resize_pos_embed
from ..layers.pos_embed import loaded_pos_embed_grid, record_pos_embed_grid
from .backbone_checks import (check_arch_fields, check_backbone_args, check_image_input,
                              check_parameter_memory, init_cfg_from_pretrained)


#: the keys of a custom arch dict mmpretrain's VisionTransformer reads (it ignores others)
VIT_ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
#: the bool arguments of mmpretrain's VisionTransformer
VIT_FLAGS = ('qkv_bias', 'final_norm', 'with_cls_token', 'pre_norm')


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
        img_size, patch_size, in_channels, out_indices, drop_rate, drop_path_rate: as in
            ``VisionTransformer``, checked as in :class:`DinoVim` (same messages).
        norm_eval: keep the LayerNorms in eval mode during training.
        attn_drop_rate: must be 0 (there is no attention matrix to drop).
        interpolate_mode (in ``kwargs``): 'bicubic' (default) or 'bilinear', the modes
            mmpretrain's position-embedding resize takes.
        pad_to_patch: zero-pad inputs on the bottom / right to a multiple of the patch size
            (ViT's behaviour); otherwise such inputs raise a ValueError, as in DinoVim.
        init_cfg: as ViT's; ``type='Pretrained'`` is built as :class:`CheckedPretrainedInit`
            (a checkpoint that fits nothing is an error).
        pretrained: deprecated, as in mmseg's backbones (whose segmentors pass it on): a
            checkpoint path or URL read as ``init_cfg=dict(type='Pretrained', checkpoint=...)``,
            with a warning; not together with ``init_cfg``. Defaults to None.
        **kwargs: ``VisionTransformer``'s other arguments.
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

    def __init__(self,
                 arch: Union[str, dict] = 'base',
                 img_size: Union[int, Tuple[int, int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = -1,
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_eval: bool = False,
                 attn_drop_rate: float = 0.,
                 pad_to_patch: bool = False,
                 pretrained: Optional[str] = None,
                 **kwargs) -> None:
        check_bool('norm_eval', norm_eval)
        check_bool('pad_to_patch', pad_to_patch)
        for name in VIT_FLAGS:
            if name in kwargs:
                check_bool(name, kwargs[name])
        if attn_drop_rate:
            raise ValueError(f'attn_drop_rate must be 0 for linear attention, got '
                             f'{attn_drop_rate}')
        if isinstance(arch, dict):
            unknown = sorted(set(arch) - set(VIT_ARCH_KEYS))
            if unknown:
                raise ValueError(f'custom arch dict has unknown keys {unknown}; allowed: '
                                 f'{list(VIT_ARCH_KEYS)}')
            check_arch_fields(arch, VIT_ARCH_KEYS)
            if {'embed_dims', 'num_heads'} <= set(arch):  # else ViT names the missing key
                dims = arch['embed_dims']
                check_argument("arch['num_heads']", arch['num_heads'],
                               f"an int >= 1 dividing arch['embed_dims'] {dims}", is_int,
                               lambda heads: heads >= 1 and dims % heads == 0)
        settings = self.arch_zoo.get(arch.lower(), {}) if isinstance(arch, str) else arch
        num_layers = settings.get('num_layers') if isinstance(settings, dict) else None
        # mmpretrain's resize_pos_embed passes align_corners, which only these modes take
        check_backbone_args(img_size, patch_size, in_channels, drop_rate, drop_path_rate,
                            num_layers, kwargs.get('frozen_stages', -1),
                            kwargs.get('interpolate_mode', 'bicubic'), ('bilinear', 'bicubic'))
        if num_layers is not None:  # else ViT names the bad arch
            out_indices = check_indices('out_indices', out_indices, num_layers)
        if isinstance(settings, dict) and set(VIT_ARCH_KEYS) <= set(settings):
            dims, ffn = settings['embed_dims'], settings['feedforward_channels']
            height, width = (img_size, img_size) if is_int(img_size) else img_size
            patches = (height // patch_size) * (width // patch_size)
            # a lower bound: each layer's qkv, projection and feed-forward weights, the patch
            # and position embeddings
            check_parameter_memory(type(self).__name__, settings, num_layers * (
                4 * dims * dims + 2 * dims * ffn) + dims * (in_channels * patch_size**2 + patches))
        kwargs['init_cfg'] = checked_pretrained_cfg(
            init_cfg_from_pretrained('LinearViT', pretrained, kwargs.get('init_cfg')))
        super().__init__(arch=arch, img_size=img_size, patch_size=patch_size,
                         in_channels=in_channels, out_indices=out_indices,
                         drop_rate=drop_rate, drop_path_rate=drop_path_rate, **kwargs)
        self._register_state_dict_hook(record_pos_embed_grid)
        self.norm_eval = norm_eval
        self.pad_to_patch = pad_to_patch
        self.patch_size = patch_size
        self._use_linear_attention(dict(kwargs, drop_rate=drop_rate,
                                        drop_path_rate=drop_path_rate))
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

    def _prepare_pos_embed(self, state_dict, prefix, local_metadata=None, *args,
                           **kwargs) -> None:
        """ViT's load-state-dict pre-hook with the table's recorded grid
        (:func:`loaded_pos_embed_grid`): ViT's takes the square root of its rows as the side."""
        name = prefix + 'pos_embed'
        if name not in state_dict:
            return
        if not self.with_cls_token and state_dict[name].shape[1] == self.pos_embed.shape[1] + 1:
            state_dict[name] = state_dict[name][:, 1:]  # as ViT: a class token it does not use
        loaded = state_dict[name]
        if GRID_METADATA_KEY not in (local_metadata or {}) and \
                tuple(loaded.shape) == tuple(self.pos_embed.shape):
            return
        grid = loaded_pos_embed_grid(loaded, self.num_extra_tokens, local_metadata, name)
        if grid != tuple(self.patch_resolution):
            state_dict[name] = resize_pos_embed(loaded, grid, self.patch_resolution,
                                                self.num_extra_tokens, self.interpolate_mode)

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

    def forward(self, inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """(B, C, H, W) -> ViT's outputs (see ``out_type``); B may be 0."""
        projection = self.patch_embed.projection
        check_image_input(inputs, projection.in_channels, self.patch_size, self.pad_to_patch,
                          projection.weight.dtype)
        return super().forward(inputs)

    def _format_output(self, x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        if self.out_type == 'featmap':  # ViT's reshape(B, h, w, -1) is ambiguous for B = 0
            patches = x[:, self.num_extra_tokens:]
            return patches.reshape(x.shape[0], *hw, x.shape[-1]).permute(0, 3, 1, 2)
        return super()._format_output(x, hw)
