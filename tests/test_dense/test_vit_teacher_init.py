"""The ViT-B / LinearViT-B dense configs load the DINO teacher with mmengine's Pretrained
initializer: after init_weights every backbone tensor equals the checkpoint's (a strict
initializer applied before the ViT's own init_weights would see pos_embed and the FFN weights
re-randomised, which is why those configs do not use one)."""
import os.path as osp

import pytest
import torch
from dense_helpers import REPO
from mmengine import Config
from mmengine.registry import init_default_scope

TINY_ARCH = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)


@pytest.mark.parametrize('backbone', ['vit', 'linearvit'])
def test_teacher_weights_survive_init_weights(backbone, tmp_path):
    path = osp.join(REPO, 'configs', 'ade20k',
                    f'upernet_{backbone}-base-p16_dino-ours_8xb2-amp-160k_ade20k-512x512.py')
    backbone_cfg = Config.fromfile(path).model.backbone
    backbone_cfg.update(arch=TINY_ARCH, img_size=(64, 64), out_indices=(0, 1))
    init_default_scope('mmseg')
    from mmseg.registry import MODELS
    donor = MODELS.build({**backbone_cfg, 'init_cfg': None})
    with torch.no_grad():
        for param in donor.parameters():
            param.normal_()
    expected = {k: v.clone() for k, v in donor.state_dict().items()}
    checkpoint = str(tmp_path / 'dino.pth')
    torch.save({'state_dict': {f'teacher.backbone.{k}': v for k, v in expected.items()},
                'meta': {}}, checkpoint)

    backbone_cfg.init_cfg.checkpoint = checkpoint
    model = MODELS.build(backbone_cfg)
    model.init_weights()
    state = model.state_dict()
    assert state.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(state[key], value), key
