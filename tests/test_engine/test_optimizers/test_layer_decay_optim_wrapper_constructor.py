"""LayerDecayOptimWrapperConstructor: per-parameter lr and weight decay of segmentor-like models
(backbone + head, no get_layer_depth on the model) against depths derived here from the names."""
import re

import pytest
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.registry import init_default_scope

from dinomamba_mm.engine.optimizers import LayerDecayOptimWrapperConstructor

BASE_LR, BASE_WD, DECAY = 1e-3, 0.05, 0.8
TINY_DINOVIM = dict(type='dinomamba_mm.DinoVim',
                    arch=dict(embed_dims=32, num_layers=3, headdim=16, d_state=8,
                              chunk_size=16),
                    img_size=32, out_type='featmap', out_indices=(0, 1, 2))
TINY_VIT_ARCH = dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64)


class _Segmentor(BaseModel):
    """Like mmseg's EncoderDecoder: a backbone and a head, no get_layer_depth of its own."""

    def __init__(self, backbone: dict):
        super().__init__()
        from mmpretrain.registry import MODELS
        self.backbone = MODELS.build(backbone)
        self.decode_head = nn.Sequential(nn.Conv2d(32, 8, 1), nn.BatchNorm2d(8))

    def forward(self, *args, **kwargs):
        raise NotImplementedError


def _expected_depth(name: str, num_layers: int) -> int:
    """Embeddings 0, block i -> i + 1, everything else (final norm, head) num_layers + 1."""
    match = re.match(r'backbone\.layers\.(\d+)\.', name)
    if match:
        return int(match.group(1)) + 1
    if re.match(r'backbone\.(patch_embed\.|pos_embed$|cls_token$)', name):
        return 0
    return num_layers + 1


@pytest.mark.parametrize('backbone', [
    TINY_DINOVIM,
    dict(type='mmpretrain.VisionTransformer', arch=TINY_VIT_ARCH, img_size=32,
         out_type='featmap', out_indices=(0, 1, 2)),
    dict(type='dinomamba_mm.LinearViT', arch=TINY_VIT_ARCH, img_size=32,
         out_type='featmap', out_indices=(0, 1, 2)),
], ids=['DinoVim', 'ViT', 'LinearViT'])
def test_lr_and_weight_decay_per_parameter(backbone):
    init_default_scope('mmpretrain')
    model = _Segmentor(backbone)
    constructor = LayerDecayOptimWrapperConstructor(
        dict(type='OptimWrapper',
             optimizer=dict(type='AdamW', lr=BASE_LR, weight_decay=BASE_WD)),
        paramwise_cfg=dict(layer_decay_rate=DECAY, flat_decay_mult=0.0,
                           custom_keys={'.pos_embed': dict(decay_mult=0.0),
                                        '.cls_token': dict(decay_mult=0.0)}))
    optimizer = constructor(model).optimizer
    groups = {g['param_name']: g for g in optimizer.param_groups}
    params = dict(model.named_parameters())
    assert groups.keys() == params.keys()
    for name, param in params.items():
        depth = _expected_depth(name, num_layers=3)
        assert groups[name]['lr'] == pytest.approx(BASE_LR * DECAY**(4 - depth)), name
        no_decay = param.ndim == 1 or name.endswith(('pos_embed', 'cls_token'))
        assert groups[name]['weight_decay'] == (0.0 if no_decay else BASE_WD), name
    # the head trains at the base lr, the patch embedding at DECAY ** 4 of it
    assert groups['decode_head.0.weight']['lr'] == pytest.approx(BASE_LR)
    assert groups['backbone.patch_embed.projection.weight']['lr'] == pytest.approx(
        BASE_LR * DECAY**4)


def test_models_without_layer_depth_are_refused():
    model = nn.Sequential(nn.Linear(2, 2))
    constructor = LayerDecayOptimWrapperConstructor(
        dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3)),
        paramwise_cfg=dict(layer_decay_rate=0.9))
    with pytest.raises(TypeError, match='get_layer_depth.*Sequential'):
        constructor(model)


def test_the_groups_are_logged_as_one_line_per_depth(monkeypatch):
    """One INFO message: a line per depth (its lr from the decay rule, its tensors counted from
    the names here), not mmpretrain's list of every parameter."""
    from dinomamba_mm.engine.optimizers import param_group_summary
    logged = []
    monkeypatch.setattr(param_group_summary, 'print_log',
                        lambda msg, **kwargs: logged.append(msg))
    init_default_scope('mmpretrain')
    model = _Segmentor(TINY_DINOVIM)
    model.backbone.layers[0].requires_grad_(False)
    LayerDecayOptimWrapperConstructor(
        dict(type='OptimWrapper',
             optimizer=dict(type='AdamW', lr=BASE_LR, weight_decay=BASE_WD)),
        paramwise_cfg=dict(layer_decay_rate=DECAY, flat_decay_mult=0.0))(model)
    (message, ) = logged
    lines = message.splitlines()
    assert lines[0].startswith('LayerDecayOptimWrapperConstructor: AdamW: ')
    by_depth = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            by_depth.setdefault(_expected_depth(name, num_layers=3), []).append(param)
    assert len(lines) == 1 + len(by_depth) + 1
    for line, depth in zip(lines[1:], sorted(by_depth)):
        params = by_depth[depth]
        scale = DECAY**(4 - depth)
        decayed = sum(p.ndim > 1 for p in params)
        assert line.startswith(f'  layer_id {depth}, lr {BASE_LR * scale:g}, lr_scale '
                               f'{scale:g}: weight_decay '), line
        if decayed:
            assert f'{BASE_WD:g} on {decayed} tensors' in line, line
        assert f'0 on {len(params) - decayed} tensors' in line, line
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert lines[-1] == (f'  not trained (requires_grad=False): {", ".join(frozen[:3])} and '
                         f'{len(frozen) - 3} more of backbone.*')
