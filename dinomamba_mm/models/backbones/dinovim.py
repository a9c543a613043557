"""DinoVim: Vision Mamba with bidirectional Mamba-2 (SSD) mixers, and its register variant."""
import inspect
import logging
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch.utils.checkpoint import checkpoint

from dinomamba_mm.argument_checks import (check_bool, check_choice, check_indices, check_int,
                                          check_number, is_int)
from dinomamba_mm.checkpoints import GRID_METADATA_KEY, checked_pretrained_cfg
from dinomamba_mm.registry import MODELS
from ..layers import DEFAULT_MIXER, GatedRMSNorm, MambaBlock, resize_pos_embed
from ..layers.pos_embed import loaded_pos_embed_grid, record_pos_embed_grid
from .backbone_checks import (available_memory, check_arch_fields, check_backbone_args,
                              check_image_input, check_parameter_memory,
                              init_cfg_from_pretrained)

ARCH_REQUIRED_KEYS = ('embed_dims', 'num_layers')
#: the Mamba-2 mixer sizes of the paper's DinoVim-T / S / B
PAPER_MIXER_SIZES = dict(headdim=64, d_state=64, expand=2, ngroups=1, d_conv=4, chunk_size=64)
TOKEN_LAYOUTS = ('interleaved', 'paper')
OUT_SOURCES = ('residual', 'mixer')


def _constructor_arguments(cls: type) -> List[str]:
    """The keyword arguments ``cls(...)`` takes: those of its ``__init__`` and, while an
    ``__init__`` takes ``**kwargs``, those of the next one up its bases, where they go."""
    names: List[str] = []
    for base in cls.__mro__:
        if '__init__' not in vars(base):
            continue
        parameters = list(inspect.signature(base.__init__).parameters.values())[1:]
        names += [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                           p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def _token_plan(num_patches: int, num_extra: int, positions: Optional[Tuple[int, ...]],
                paper_cls: bool, device=None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where every token goes in the sequence, as index tensors built with tensor operations
    (so that torch.export can trace them with a symbolic number of patches).

    Sources are ``[patches (num_patches), extra tokens (num_extra)]`` and, for the paper's class
    token layout, one more: the class token without position embedding.

    Returns:
        order: source index of each sequence position;
        read: sequence positions of the output tokens (class token / registers);
        patches: sequence positions of the patches, in raster order.
    """
    def arange(start, end):
        return torch.arange(start, end, device=device)

    if paper_cls:
        # [cls + pos, patches] (M = N + 1 tokens), then a plain class token inserted at M // 2
        middle = (num_patches + 1) // 2
        order = torch.cat([arange(num_patches, num_patches + 1), arange(0, middle - 1),
                           arange(num_patches + 1, num_patches + 2),
                           arange(middle - 1, num_patches)])
        return order, arange(middle, middle + 1), torch.cat(
            [arange(1, middle), arange(middle + 1, num_patches + 2)])
    length = num_patches + num_extra
    if positions is None:
        # the paper's MambaR rule: with S = num_patches // (num_extra + 1), extra token r follows
        # the r-th run of S patches (position r (S + 1) + S), the remaining patches come last;
        # one token lands at num_patches // 2, the middle class token of Vision Mamba
        stride = num_patches // (num_extra + 1)
        read = arange(0, num_extra) * (stride + 1) + stride
    else:
        bad = [p for p in positions if not 0 <= p < length]
        if bad:
            raise ValueError(f'register_positions {list(positions)} must lie in [0, {length}) '
                             f'for {num_patches} patches and {num_extra} extra tokens; '
                             f'out of range: {bad}')
        read = torch.tensor(positions, dtype=torch.long, device=device)
    extra = torch.zeros(length, dtype=torch.long, device=device).index_fill(0, read, 1)
    order = (arange(0, length) - extra.cumsum(0)).index_put((read, ),
                                                            num_patches + arange(0, num_extra))
    # patch j sits after the extra tokens of rank r whose position minus r is at most j
    ahead = read.sort().values - arange(0, num_extra)
    patches = arange(0, num_patches)
    return order, read, patches + (ahead[None, :] <= patches[:, None]).sum(1)


@MODELS.register_module()
class DinoVim(BaseModule):
    """Vision Mamba with bidirectional Mamba-2 mixers (DinoVim of "RNN as Linear Transformer").

    image -> patch embedding (+ absolute position embedding, resized bicubically to the input's
    patch grid) -> class token inserted in the middle of the patch sequence (or registers) ->
    ``num_layers`` blocks ``x + drop_path(mixer(RMSNorm(x)))`` with a float32 residual stream ->
    final RMSNorm ``norm_f`` -> outputs chosen by ``out_type`` / ``out_indices`` as in
    mmpretrain's ``VisionTransformer``.

    The mixer is any registered token mixer (``mixer_cfg``; the paper's
    ``BidirectionalMamba2Mixer`` by default); the analysis reads its mixing matrices through
    :func:`dinomamba_mm.analysis.capture_mixer_inputs` and ``mixing_matrix``.

    Args:
        arch (str | dict): 'tiny' / 'small' / 'base' (aliases 't' / 's' / 'b'): embed_dims
            256 / 512 / 768, 24 layers and the paper's Mamba-2 mixer sizes headdim 64,
            d_state 64, expand 2, ngroups 1, d_conv 4, chunk_size 64 (the SSD scan's chunk
            length: see ``ssd_scan``); or a dict with ``embed_dims`` and ``num_layers`` and any
            of the mixer's size arguments (ints; those left out take the mixer's defaults, for
            the Mamba-2 mixer the same paper values; ``num_heads`` for attention mixers).
            Every key but ``embed_dims`` and ``num_layers`` is passed to the mixer.
            Defaults to 'base'.
        img_size (int | tuple): Input size the position embedding is stored for (any multiple
            of the patch size runs; the embedding is resized per input). The paper's Vim
            stores 224 (14x14), its MambaR 112 (a 7x7 table); a loaded table of another grid is
            resampled once at load, with a warning. Defaults to 224.
        patch_size (int): Patch size and stride of the patch embedding. Defaults to 16.
        in_channels (int): Input channels. Defaults to 3.
        out_indices (int | Sequence[int]): Block indices to output (negative counts from the
            end). Defaults to -1.
        out_type (str): 'cls_token' (B, C): the class token, or the mean of the registers;
            'featmap' (B, C, h, w): patch tokens on their grid, for dense heads;
            'avg_featmap' (B, C): mean of the patch tokens (no extra norm layer after the
            mean, unlike mmpretrain's ViT, so paper checkpoints load strictly); 'raw'
            (B, L, C): all tokens in sequence order. Defaults to 'cls_token'.
        out_source (str): What a block outputs. 'residual': the residual stream after the
            block (mmpretrain ViT's convention; ``norm_f`` applied after the last block when
            ``final_norm``); 'mixer': ``norm_f`` of the block's mixer output, the paper code's
            ``get_intermediate_layers`` (its linear-probe features). 'mixer' needs final_norm.
            Defaults to 'residual'.
        final_norm (bool): Build ``norm_f`` and apply it after the last block.
            Defaults to True.
        drop_rate (float): Dropout on the tokens after the position embedding. Defaults to 0.
        drop_path_rate (float): Stochastic depth, linear from 0 (first block) to this (last
            block). Defaults to 0.1.
        num_registers (int): 0: one class token (``cls_token`` (1, 1, C)); R > 0: R register
            tokens (``register_tokens`` (1, R, C)) whose mean is the 'cls_token' output
            (DinoMamba-Reg). Defaults to 0.
        register_positions (Sequence[int], optional): Sequence positions of the class token /
            registers (one int each, in [0, num_patches + E)); None spreads them evenly (a
            single class token sits at num_patches // 2), see :func:`_token_plan`.
            Defaults to None.
        token_layout (str): 'interleaved': the extra tokens, each with its own position
            embedding, at their positions; 'paper': the Dino-Mamba paper code's exact layout,
            so that its checkpoints give its features: with a class token, the class token
            plus its position embedding first, then the patches, and a second copy of the class
            token WITHOUT position embedding inserted at index M // 2 of those M = N + 1 tokens
            (read there); with registers its token order equals 'interleaved'. 'paper' also
            resizes the position embedding with DINO's scale-factor convention (see
            ``resize_pos_embed``), so the paper's MambaR needs it too.
            Defaults to 'interleaved'.
        pad_to_patch (bool): Zero-pad inputs on the bottom / right to a multiple of the patch
            size; otherwise such inputs raise a ValueError. Defaults to False.
        interpolate_mode (str): Interpolation of the position embedding.
            Defaults to 'bicubic'.
        frozen_stages (int): Freeze the embeddings and the first ``frozen_stages`` blocks (and
            ``norm_f`` when all are frozen); -1 freezes nothing. Defaults to -1.
        norm_eval (bool): Keep the normalisation layers in eval mode during training (kept for
            the OpenMMLab interface; RMSNorm has no running statistics, so this changes nothing
            unless a subclass adds such norms). Defaults to False.
        norm_eps (float): Epsilon of the block RMSNorms and ``norm_f``. Defaults to 1e-5.
        with_cp (bool): Activation checkpointing of each block when grad is enabled
            (activations are recomputed in the backward pass: less memory, about one more
            forward of time). Defaults to False.
        mixer_cfg (dict, optional): The token mixer of every block: ``type``, a registered
            mixer (:mod:`dinomamba_mm.models.layers.token_mixer`: ``BidirectionalMamba2Mixer``
            when left out, ``LinearMultiheadAttention``, ``SoftmaxAttention``), and its further
            arguments; the block gives it ``embed_dims``, ``arch`` its sizes. The Mamba-2
            mixer's have the paper's defaults: A_init_range (1, 16), dt_min 1e-3, dt_max 0.1,
            dt_init_floor 1e-4, dt_limit (0, inf), bias False, conv_bias True,
            norm_before_gate False, ssd_impl None, segment_len None (an int: no-grad
            sequences longer than this run in segments of at most this many tokens: less
            memory, same result, a little slower; the UperNet / Cascade Mask R-CNN configs set
            512). Defaults to None.
        init_cfg (dict | list[dict], optional): mmengine init config, e.g.
            ``dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=...)`` (strict);
            ``type='Pretrained'`` is built as :class:`CheckedPretrainedInit` (a checkpoint
            that fits nothing is an error). Random initialisation happens at construction.
            Defaults to None.
        pretrained (str, optional): Deprecated, as in mmseg's backbones (whose segmentors pass
            it on): a checkpoint path or URL read as ``init_cfg=dict(type='Pretrained',
            checkpoint=...)``, with a warning; not together with ``init_cfg``.
            Defaults to None.
    """
    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=256, num_layers=24,
                                            **PAPER_MIXER_SIZES)),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=512, num_layers=24,
                                             **PAPER_MIXER_SIZES)),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=768, num_layers=24,
                                            **PAPER_MIXER_SIZES)),
    }
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')

    def __init__(self,
                 arch: Union[str, dict] = 'base',
                 img_size: Union[int, Tuple[int, int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = -1,
                 out_type: str = 'cls_token',
                 out_source: str = 'residual',
                 final_norm: bool = True,
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 num_registers: int = 0,
                 register_positions: Optional[Sequence[int]] = None,
                 token_layout: str = 'interleaved',
                 pad_to_patch: bool = False,
                 interpolate_mode: str = 'bicubic',
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 norm_eps: float = 1e-5,
                 with_cp: bool = False,
                 mixer_cfg: Optional[dict] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None,
                 pretrained: Optional[str] = None) -> None:
        super().__init__(checked_pretrained_cfg(
            init_cfg_from_pretrained(type(self).__name__, pretrained, init_cfg)))
        self.arch_settings = self._parse_arch(arch)
        self.embed_dims = self.arch_settings['embed_dims']
        self.num_layers = self.arch_settings['num_layers']

        for name, flag in (('final_norm', final_norm), ('pad_to_patch', pad_to_patch),
                           ('norm_eval', norm_eval), ('with_cp', with_cp)):
            check_bool(name, flag)
        check_choice('out_type', out_type, self.OUT_TYPES)
        check_choice('out_source', out_source, OUT_SOURCES)
        if out_source == 'mixer' and not final_norm:
            raise ValueError("out_source='mixer' outputs norm_f(mixer output) and needs "
                             'final_norm=True')
        check_choice('token_layout', token_layout, TOKEN_LAYOUTS)
        check_int('num_registers', num_registers, 0)
        check_backbone_args(img_size, patch_size, in_channels, drop_rate, drop_path_rate,
                            self.num_layers, frozen_stages, interpolate_mode)
        check_number('norm_eps', norm_eps, 0, exclusive_minimum=True)
        self.mixer_cfg = self._mixer_config(mixer_cfg)
        check_parameter_memory(type(self).__name__, self.arch_settings,
                               self._least_parameters(img_size, patch_size, in_channels))
        self.out_type = out_type
        self.out_source = out_source
        self.final_norm = final_norm
        self.token_layout = token_layout
        self.num_registers = num_registers
        self.num_extra_tokens = max(num_registers, 1)
        self.paper_cls_layout = token_layout == 'paper' and num_registers == 0
        self.register_positions = self._parse_positions(register_positions)
        self.pad_to_patch = pad_to_patch
        self.interpolate_mode = interpolate_mode
        self.resize_convention = 'dino' if token_layout == 'paper' else 'size'
        self.out_indices = check_indices('out_indices', out_indices, self.num_layers)
        self.norm_eval = norm_eval
        self.with_cp = with_cp

        self.patch_size = patch_size
        self.patch_embed = PatchEmbed(
            in_channels=in_channels,
            embed_dims=self.embed_dims,
            conv_type='Conv2d',
            kernel_size=patch_size,
            stride=patch_size,
            padding='corner' if pad_to_patch else 0,
            input_size=img_size,
            bias=True)
        self.patch_resolution = tuple(self.patch_embed.init_out_size)
        num_patches = self.patch_resolution[0] * self.patch_resolution[1]

        extra = torch.zeros(1, self.num_extra_tokens, self.embed_dims)
        if num_registers:
            self.register_tokens = nn.Parameter(extra)
        else:
            self.cls_token = nn.Parameter(extra)
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.num_extra_tokens + num_patches, self.embed_dims))
        self._register_load_state_dict_pre_hook(self._resize_loaded_pos_embed)
        self._register_state_dict_hook(record_pos_embed_grid)
        self.drop_after_pos = nn.Dropout(p=drop_rate)

        dpr = np.linspace(0, drop_path_rate, self.num_layers)
        self.layers = nn.ModuleList([
            MambaBlock(self.embed_dims, float(dpr[i]), norm_eps, self.mixer_cfg)
            for i in range(self.num_layers)
        ])
        if final_norm:
            self.norm_f = nn.RMSNorm(self.embed_dims, eps=norm_eps)

        self._init_parameters()
        self.frozen_stages = frozen_stages
        if frozen_stages > 0:
            self._freeze_stages()

    # ----------------------------------------------------------------- construction helpers
    def _parse_arch(self, arch: Union[str, dict]) -> dict:
        if isinstance(arch, str):
            key = arch.lower()
            if key not in self.arch_zoo:
                raise ValueError(f'arch {arch!r} is not one of {sorted(self.arch_zoo)}; '
                                 'pass a dict for a custom size')
            return dict(self.arch_zoo[key])
        if not isinstance(arch, dict):
            raise TypeError(f'arch must be a str or a dict, got {type(arch).__name__}')
        missing = [k for k in ARCH_REQUIRED_KEYS if k not in arch]
        if missing:
            raise ValueError(f'custom arch dict {arch} lacks keys {missing}; required: '
                             f'{list(ARCH_REQUIRED_KEYS)}, and optionally sizes of the mixer '
                             f'(the paper\'s: {PAPER_MIXER_SIZES})')
        check_arch_fields(arch, list(arch))
        return dict(arch)

    def _least_parameters(self, img_size, patch_size: int, in_channels: int) -> int:
        """A lower bound of the parameter count: one mixer of ``self.mixer_cfg`` (built on the
        meta device, which allocates nothing) per block, the patch embedding and the position
        embedding."""
        dims = self.arch_settings['embed_dims']
        with torch.device('meta'):
            mixer = MODELS.build(dict(self.mixer_cfg, embed_dims=dims))
        block = sum(p.numel() for p in mixer.parameters())
        height, width = (img_size, img_size) if is_int(img_size) else img_size
        patches = (height // patch_size) * (width // patch_size)
        return self.num_layers * block + dims * (in_channels * patch_size**2 + patches)

    def _mixer_config(self, mixer_cfg: Optional[dict]) -> dict:
        """The blocks' mixer config: ``mixer_cfg`` (type: :data:`DEFAULT_MIXER` when left out)
        with the sizes ``arch`` gives; keys the mixer does not take are refused here."""
        cfg = {'type': DEFAULT_MIXER, **(mixer_cfg or {})}
        sizes = {k: v for k, v in self.arch_settings.items() if k not in ARCH_REQUIRED_KEYS}
        clash = sorted(set(cfg) & set(self.arch_settings))
        if clash:
            raise ValueError(f'mixer_cfg keys {clash} belong in arch, not mixer_cfg')
        mixer = MODELS.get(cfg['type']) if isinstance(cfg['type'], str) else cfg['type']
        if mixer is None:
            raise KeyError(f"mixer_cfg type {cfg['type']!r} is not a registered model; from "
                           "another scope name ours as 'dinomamba_mm.Name'")
        takes = [name for name in _constructor_arguments(mixer) if name != 'embed_dims']
        unknown = sorted(set(sizes) - set(takes))
        if unknown:
            raise ValueError(
                f'arch has unknown keys {unknown} for {mixer.__name__}; allowed: '
                f'{list(ARCH_REQUIRED_KEYS) + takes} (the named archs give the Mamba-2 '
                "mixer's sizes: another mixer takes a custom arch dict)")
        unknown = sorted(set(cfg) - set(takes) - {'type', '_scope_'})
        if unknown:
            in_arch = f' (the mixer settings {sorted(sizes)} go in arch)' if sizes else ''
            raise ValueError(f'mixer_cfg has unknown keys {unknown}; allowed: '
                             f'{[k for k in takes if k not in sizes]}{in_arch}')
        return {**cfg, **sizes}

    def _parse_positions(self, positions) -> Optional[Tuple[int, ...]]:
        if positions is None:
            return None
        if self.paper_cls_layout:
            raise ValueError("register_positions cannot be used with token_layout='paper' and a "
                             'class token: that layout fixes the positions')
        if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence):
            raise TypeError(f'register_positions must be a sequence of ints, got {positions!r}')
        positions = tuple(positions)
        if len(positions) != self.num_extra_tokens or len(set(positions)) != len(positions) \
                or not all(is_int(p) and p >= 0 for p in positions):
            raise ValueError(f'register_positions must hold {self.num_extra_tokens} distinct '
                             f'ints >= 0 (one per class / register token), got {positions}')
        return positions

    def _init_parameters(self) -> None:
        """Random init of the paper code (Vim / Mamba-2), done at construction."""
        trunc_normal_(self.pos_embed, std=.02)
        trunc_normal_(self._extra_tokens, std=.02)
        conv = self.patch_embed.projection
        fan_in = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
        # LeCun normal: truncated normal with variance 1 / fan_in after truncation at 2 std
        trunc_normal_(conv.weight, std=math.sqrt(1. / fan_in) / .87962566103423978)
        nn.init.zeros_(conv.bias)
        for layer in self.layers:
            layer.mixer.init_residual_output(self.num_layers)

    @property
    def _extra_tokens(self) -> nn.Parameter:
        """(1, E, C): the class token or the registers."""
        return self.register_tokens if self.num_registers else self.cls_token

    def _resize_loaded_pos_embed(self, state_dict, prefix, local_metadata=None, *args,
                                 **kwargs) -> None:
        """Load-state-dict pre-hook: resample a table of another patch grid (the recorded one:
        :func:`loaded_pos_embed_grid`) to this model's."""
        name = prefix + 'pos_embed'
        if name not in state_dict:
            return
        loaded = state_dict[name]
        recorded = GRID_METADATA_KEY in (local_metadata or {})
        if not recorded and tuple(loaded.shape) == tuple(self.pos_embed.shape):
            return
        grid = loaded_pos_embed_grid(loaded, self.num_extra_tokens, local_metadata, name)
        if grid == tuple(self.patch_resolution):
            return
        state_dict[name] = resize_pos_embed(loaded, grid, self.patch_resolution,
                                            self.num_extra_tokens, self.interpolate_mode,
                                            self.resize_convention)
        source = 'x'.join(map(str, grid))
        target = 'x'.join(map(str, self.patch_resolution))
        img_size = grid[0] * self.patch_size if grid[0] == grid[1] else tuple(
            side * self.patch_size for side in grid)
        print_log(f'{name}: the loaded table is for a {source} patch grid'
                  f'{"" if recorded else " (none recorded: taken as square)"}, this '
                  f'{type(self).__name__} stores {target}: resampled to {target} now '
                  f'({self.interpolate_mode}, {self.resize_convention!r} convention) and again '
                  'to each input grid, which differs from resampling the checkpoint\'s table '
                  f'once per input (build with img_size={img_size} for that)',
                  logger='current', level=logging.WARNING)

    # ------------------------------------------------------------------------------ freezing
    def _frozen_modules(self) -> List[nn.Module]:
        modules = [self.patch_embed, self.drop_after_pos]
        modules += list(self.layers[:self.frozen_stages])
        if self.frozen_stages >= self.num_layers and self.final_norm:
            modules.append(self.norm_f)
        return modules

    def _freeze_stages(self) -> None:
        self.pos_embed.requires_grad = False
        self._extra_tokens.requires_grad = False
        for module in self._frozen_modules():
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'DinoVim':
        super().train(mode)
        if mode and self.frozen_stages > 0:
            for module in self._frozen_modules():
                module.eval()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, (nn.RMSNorm, GatedRMSNorm, nn.LayerNorm, nn.GroupNorm,
                                       nn.modules.batchnorm._BatchNorm)):
                    module.eval()
        return self

    def get_layer_depth(self, param_name: str, prefix: str = '') -> Tuple[int, int]:
        """Layer-wise depth of a parameter, as mmpretrain's ViT (for layer-wise lr decay).

        Embeddings (patch, position, class / register tokens) are depth 0, block i is i + 1,
        the rest (``norm_f`` and anything outside ``prefix``, e.g. a head) is num_layers + 1.

        Returns:
            (layer_depth, num_layers + 2).
        """
        num_layers = self.num_layers + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        name = param_name[len(prefix):]
        if name in ('cls_token', 'register_tokens', 'pos_embed') or \
                name.startswith('patch_embed'):
            return 0, num_layers
        if name.startswith('layers.'):
            return int(name.split('.')[1]) + 1, num_layers
        return num_layers - 1, num_layers

    # ------------------------------------------------------------------------------- forward
    def token_plan(self, patch_resolution: Tuple[int, int],
                   device: Optional[torch.device] = None) -> Dict[str, torch.Tensor]:
        """Index tensors of the sequence for a patch grid (h, w).

        Returns:
            dict with 'order' (L,): source index of each position (sources = patches, extra
            tokens[, plain class token]); 'read' (E',): positions of the class token /
            registers; 'patches' (h*w,): positions of the patches in raster order.
        """
        num_patches = patch_resolution[0] * patch_resolution[1]
        plan = _token_plan(num_patches, self.num_extra_tokens, self.register_positions,
                           self.paper_cls_layout, device)
        return dict(zip(('order', 'read', 'patches'), plan))

    def _embed(self, inputs: torch.Tensor):
        """(B, 3, H, W) -> tokens (B, L, C) in sequence order, grid (h, w), token plan."""
        batch = inputs.shape[0]
        projection = self.patch_embed.projection
        check_image_input(inputs, projection.in_channels, self.patch_size, self.pad_to_patch,
                          projection.weight.dtype)
        patches, hw = self.patch_embed(inputs)
        pos = resize_pos_embed(self.pos_embed, self.patch_resolution, tuple(hw),
                               self.num_extra_tokens, self.interpolate_mode,
                               self.resize_convention)
        extra_tokens = self._extra_tokens.expand(batch, -1, -1)
        sources = [patches + pos[:, self.num_extra_tokens:],
                   extra_tokens + pos[:, :self.num_extra_tokens]]
        if self.paper_cls_layout:
            sources.append(extra_tokens)
        plan = self.token_plan(tuple(hw), inputs.device)
        tokens = torch.cat(sources, dim=1)[:, plan['order']]
        return self.drop_after_pos(tokens), tuple(hw), plan

    def _format_output(self, x: torch.Tensor, hw: Tuple[int, int],
                       plan: Dict[str, torch.Tensor]) -> torch.Tensor:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, plan['read']].mean(dim=1)
        patches = x[:, plan['patches']]
        if self.out_type == 'avg_featmap':
            return patches.mean(dim=1)
        return patches.reshape(x.shape[0], *hw, x.shape[-1]).permute(0, 3, 1, 2)

    def activation_bytes(self, inputs: torch.Tensor) -> int:
        """A lower bound of the activation memory a forward (and backward, when grad is enabled)
        of ``inputs`` (B, C, H, W) takes: the residual stream and one mixer's working set
        (``activation_elements`` of the mixer: for the Mamba-2 mixer its in_proj output and,
        per scan direction, its conv output, its output and the chunk scan's (Q x Q per chunk)
        products, over a segment when the mixer runs in segments); with grad, also what every
        block keeps for the backward pass (its input and normalised input and what the mixer
        keeps; only the block inputs with ``with_cp``). Measured CPU peaks of DinoVim are
        1.2-3.5x it (4.5x with ``with_cp``).
        """
        height, width = (-(-s // self.patch_size) for s in inputs.shape[-2:])
        tokens = height * width + self.num_extra_tokens + self.paper_cls_layout
        working, kept = self.layers[0].mixer.activation_elements(tokens)
        block = working + 2 * tokens * self.embed_dims
        if torch.is_grad_enabled():
            block += self.num_layers * (tokens * self.embed_dims if self.with_cp else
                                        2 * tokens * self.embed_dims + kept)
        device = inputs.device.type
        itemsize = 2 if device in ('cpu', 'cuda') and torch.is_autocast_enabled(device) else 4
        return len(inputs) * block * itemsize

    def _check_memory(self, inputs: torch.Tensor) -> None:
        """MemoryError before the forward when it cannot fit (it failed inside the mixer, after
        minutes, with the allocator's message)."""
        needed = self.activation_bytes(inputs)
        available = available_memory(inputs.device) if needed >= 2**30 else None
        if available is None or needed <= available:
            return
        grad = torch.is_grad_enabled()
        raise MemoryError(
            f'{type(self).__name__}: an input of shape {tuple(inputs.shape)} needs at least '
            f'{needed / 2**30:.1f} GiB of activation memory ({"training" if grad else "no-grad"} '
            f'forward), {available / 2**30:.1f} GiB is available on {inputs.device}. Lower it '
            'with a smaller batch or input size' + (
                ', --cfg-options model.backbone.with_cp=True (activation checkpointing)' if grad
                else ', --cfg-options model.backbone.mixer_cfg.segment_len=512 (segmented '
                'forward)' if getattr(self.layers[0].mixer, 'segment_len', 0) is None else ''))

    def forward(self, inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """(B, 3, H, W), B >= 0 -> tuple of one output per ``out_indices`` entry (see out_type).

        Raises:
            MemoryError: the forward's :meth:`activation_bytes` exceed the device's
                available memory.
        """
        self._check_memory(inputs)
        x, hw, plan = self._embed(inputs)
        outs = []
        for i, layer in enumerate(self.layers):
            if self.with_cp and torch.is_grad_enabled():
                x, hidden = checkpoint(layer, x, use_reentrant=False)
            else:
                x, hidden = layer(x)
            if i in self.out_indices:
                outs.append(self._format_output(self._block_feature(i, x, hidden), hw, plan))
            del hidden  # not kept alive through the next block
        return tuple(outs)

    def _block_feature(self, index: int, x: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Output tokens (B, L, C) of block ``index`` from its residual x and mixer output."""
        if self.out_source == 'mixer':
            return self.norm_f(hidden.to(self.norm_f.weight.dtype))
        if index == self.num_layers - 1 and self.final_norm:
            return self.norm_f(x.to(self.norm_f.weight.dtype))
        return x


@MODELS.register_module()
class DinoMambaReg(DinoVim):
    """DinoMamba-Reg (the paper's MambaR): DinoVim with register tokens instead of a class token.

    The register tokens, each with its own position embedding, are spread evenly among the
    patches (or put at ``register_positions``); the 'cls_token' output is their mean. The
    paper's MambaR is ``token_layout='paper', img_size=112``: a 7x7 table resampled to each
    input's grid.

    Args:
        arch (str | dict): As :class:`DinoVim`'s. Defaults to 'base'.
        num_registers (int): Number of register tokens, >= 1. Defaults to 12.
        **kwargs: :class:`DinoVim`'s other arguments.
    """

    def __init__(self, arch: Union[str, dict] = 'base', num_registers: int = 12,
                 **kwargs) -> None:
        check_int('num_registers', num_registers, 1)
        super().__init__(arch=arch, num_registers=num_registers, **kwargs)
