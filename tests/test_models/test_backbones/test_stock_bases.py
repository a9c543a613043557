"""Our backbones drop into the stock mmseg / mmdet configs.

- mmseg: ``mmseg::_base_/models/upernet_vit-b16_ln_mln.py`` unmodified, with only the backbone
  replaced (``_delete_=True``) and the neck given its width. The base's
  ``model.pretrained`` (ViT weights) reaches the backbone through mmseg's ``EncoderDecoder``; our
  backbones read it as mmseg's own do: ``init_cfg=dict(type='Pretrained', ...)`` and a warning.
- mmdet: ``mmdet::_base_/models/mask-rcnn_r50_fpn.py`` with the ResNet replaced by DinoVim and
  the base's FPN given the backbone's width, behind mmseg's Feature2Pyramid (a plain backbone has
  one stride, 16; the base's anchors and RoI extractor expect strides 4 to 64), as our Cascade
  Mask R-CNN configs do.
Tiny backbones (32 wide), 64 x 64 images, CPU.
"""
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import dinomamba_mm  # noqa: F401  (dinomamba_mm:: configs, our registries)
from dinomamba_mm.registry import MODELS

WIDTH = 32
TINY_DINOVIM = dict(type='dinomamba_mm.DinoVim',
                    arch=dict(embed_dims=WIDTH, num_layers=4, headdim=16, d_state=8),
                    img_size=64, out_type='featmap', out_indices=(0, 1, 2, 3))
MMSEG_CHILD = f"""
_base_ = 'mmseg::_base_/models/upernet_vit-b16_ln_mln.py'
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
model = dict(
    backbone=dict(_delete_=True, **{TINY_DINOVIM!r}),
    neck=dict(in_channels=[{WIDTH}] * 4))  # its MultiLevelNeck gives the heads their 768
"""
MMDET_CHILD = f"""
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
model = dict(
    backbone=dict(_delete_=True, **{TINY_DINOVIM!r}),
    neck=[dict(type='mmseg.Feature2Pyramid', embed_dim={WIDTH}, rescales=[4, 2, 1, 0.5],
               norm_cfg=dict(type='BN', requires_grad=True)),
          dict(type='FPN', in_channels=[{WIDTH}] * 4, out_channels=256, num_outs=5)])
"""
VIT_WEIGHTS = 'pretrain/jx_vit_base_p16_224-80ecf9dd.pth'  # the mmseg base's model.pretrained


def _config(tmp_path, text: str) -> Config:
    path = tmp_path / 'child.py'
    path.write_text(text)
    return Config.fromfile(str(path))


def _image() -> torch.Tensor:
    return torch.from_numpy(
        np.random.default_rng(0).integers(0, 256, (3, 64, 64), dtype=np.uint8))


def test_an_unmodified_mmseg_base_passes_its_pretrained_to_our_backbone(tmp_path):
    cfg = _config(tmp_path, MMSEG_CHILD)
    assert cfg.model.pretrained == VIT_WEIGHTS and 'pretrained' not in cfg.model.backbone
    init_default_scope('mmseg')
    with pytest.warns(FutureWarning, match=f'DinoVim: pretrained is deprecated.*{VIT_WEIGHTS}'):
        model = MODELS.build(cfg.model)
    assert type(model.backbone).__name__ == 'DinoVim'
    assert model.backbone.init_cfg == dict(type='Pretrained', checkpoint=VIT_WEIGHTS,
                                           _scope_='dinomamba_mm')
    with pytest.raises(FileNotFoundError, match=VIT_WEIGHTS):  # the base's file is not here
        model.init_weights()

    from mmseg.structures import SegDataSample
    sample = SegDataSample(metainfo=dict(ori_shape=(64, 64), img_shape=(64, 64)))
    with torch.no_grad():
        (result, ) = model.eval().test_step(dict(inputs=[_image()], data_samples=[sample]))
    assert result.pred_sem_seg.data.shape == (1, 64, 64)
    assert int(result.pred_sem_seg.data.max()) < 19  # the base's 19 classes


def test_the_segmentor_pretrained_loads_the_backbone_weights(tmp_path):
    """``model.pretrained`` set to a DinoVim checkpoint: the backbone ends with its weights
    (the oracle: the saved tensors), the heads keep their own initialisation."""
    saved = MODELS.build(TINY_DINOVIM)
    torch.manual_seed(1)
    for param in saved.parameters():
        param.data.normal_()
    checkpoint = tmp_path / 'dinovim.pth'
    torch.save(dict(state_dict=saved.state_dict()), checkpoint)

    cfg = _config(tmp_path, MMSEG_CHILD + f"model.update(pretrained='{checkpoint}')\n")
    init_default_scope('mmseg')
    with pytest.warns(FutureWarning, match='pretrained is deprecated'):
        model = MODELS.build(cfg.model)
    model.init_weights()
    for name, value in saved.state_dict().items():
        torch.testing.assert_close(model.backbone.state_dict()[name], value, rtol=0, atol=0,
                                   msg=name)


def test_an_mmdet_mask_rcnn_base_with_our_backbone_predicts(tmp_path):
    from mmdet.structures import DetDataSample
    cfg = _config(tmp_path, MMDET_CHILD)
    init_default_scope('mmdet')
    model = MODELS.build(cfg.model)
    model.init_weights()
    assert type(model.backbone).__name__ == 'DinoVim'
    features = model.extract_feat(torch.zeros(1, 3, 64, 64))
    assert [f.shape[-1] for f in features] == [64 // s for s in (4, 8, 16, 32, 64)]
    sample = DetDataSample(metainfo=dict(ori_shape=(64, 64), img_shape=(64, 64),
                                         scale_factor=(1.0, 1.0)))
    with torch.no_grad():
        (result, ) = model.eval().test_step(dict(inputs=[_image()], data_samples=[sample]))
    boxes = result.pred_instances.bboxes
    assert boxes.shape[1] == 4 and bool(((boxes >= 0) & (boxes <= 64)).all())
    assert result.pred_instances.masks.shape[1:] == (64, 64)


BACKBONES = [
    dict(TINY_DINOVIM, out_type='cls_token', out_indices=-1),
    dict(TINY_DINOVIM, type='dinomamba_mm.DinoMambaReg', out_type='cls_token', out_indices=-1,
         num_registers=2),
    dict(type='dinomamba_mm.LinearViT', arch='tiny', img_size=32),
]


@pytest.mark.parametrize('backbone', BACKBONES, ids=['DinoVim', 'DinoMambaReg', 'LinearViT'])
def test_pretrained_is_read_as_mmseg_reads_it(backbone):
    name = backbone['type'].split('.')[1]
    with pytest.warns(FutureWarning, match=f'{name}: pretrained is deprecated'):
        model = MODELS.build(dict(backbone, pretrained='weights.pth'))
    assert model.init_cfg == dict(type='Pretrained', checkpoint='weights.pth',
                                  _scope_='dinomamba_mm')
    with pytest.raises(ValueError, match=f"{name}: pretrained='weights.pth' and init_cfg=.* "
                       'both set the initialisation.*model.pretrained=None'):
        MODELS.build(dict(backbone, pretrained='weights.pth',
                          init_cfg=dict(type='Pretrained', checkpoint='other.pth')))
    with pytest.raises(TypeError, match=f'{name} pretrained must be a checkpoint path or URL '
                       r'\(str\) or None, got True'):
        MODELS.build(dict(backbone, pretrained=True))
    assert MODELS.build(dict(backbone, pretrained=None)).init_cfg is None
