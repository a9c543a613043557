"""init_cfg=dict(type='Pretrained') on our backbones: mmengine's loading, clear errors.

The case that motivated it: a whole DINO checkpoint given without prefix loaded 0 of 35
tensors into DinoVim with one log line, and training went on from random weights.
"""
import pytest
import torch
from mmengine.registry import DefaultScope

import dinomamba_mm  # noqa: F401
from dinomamba_mm.registry import MODELS

DINOVIM = dict(type='dinomamba_mm.DinoVim', img_size=32, patch_size=8,
               arch=dict(embed_dims=16, num_layers=2, headdim=8, d_state=4))
LINEARVIT = dict(type='dinomamba_mm.LinearViT', img_size=32, patch_size=8,
                 arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32))


def dino_checkpoint(path, backbone_cfg, **arch):
    """A DINO-like checkpoint: the backbone under teacher.backbone. and backbone., plus more."""
    torch.manual_seed(1)
    cfg = dict(backbone_cfg, arch=dict(backbone_cfg['arch'], **arch))
    weights = MODELS.build(cfg).state_dict()
    state = {**{f'teacher.backbone.{k}': v for k, v in weights.items()},
             **{f'backbone.{k}': v + 1 for k, v in weights.items()},
             'head.center': torch.zeros(1, 8)}
    torch.save({'state_dict': state, 'meta': {}}, str(path))
    return str(path), weights


def build_and_init(backbone_cfg, **init_cfg):
    with DefaultScope.overwrite_default_scope('mmpretrain'):  # as in the configs
        model = MODELS.build(dict(backbone_cfg, init_cfg=dict(type='Pretrained', **init_cfg)))
    model.init_weights()
    return model


@pytest.mark.parametrize('backbone_cfg', [DINOVIM, LINEARVIT], ids=['DinoVim', 'LinearViT'])
def test_a_checkpoint_without_the_module_keys_is_refused_with_the_prefix_that_fits(
        tmp_path, backbone_cfg):
    path, weights = dino_checkpoint(tmp_path / 'dino.pth', backbone_cfg)
    with pytest.raises(ValueError) as info:
        build_and_init(dict(backbone_cfg, out_indices=-1), checkpoint=path)
    message = str(info.value)
    name = backbone_cfg['type'].split('.')[1]
    assert message.startswith(f"checkpoint '{path}' does not match {name}: none of the "
                              f'{len(weights)} keys of {name} is in it')
    assert (f"Hint: the checkpoint holds {len(weights)} of the {len(weights)} expected keys "
            "under the prefix 'backbone.' or 'teacher.backbone.'") in message


@pytest.mark.parametrize('backbone_cfg', [DINOVIM, LINEARVIT], ids=['DinoVim', 'LinearViT'])
def test_the_right_prefix_loads_the_teacher(tmp_path, backbone_cfg):
    path, weights = dino_checkpoint(tmp_path / 'dino.pth', backbone_cfg)
    model = build_and_init(backbone_cfg, checkpoint=path, prefix='teacher.backbone.')
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key]), key


def test_an_absent_prefix_and_another_width_are_refused(tmp_path):
    path, _ = dino_checkpoint(tmp_path / 'dino.pth', DINOVIM)
    with pytest.raises(ValueError) as info:
        build_and_init(DINOVIM, checkpoint=path, prefix='student.backbone')
    assert str(info.value) == (f"checkpoint '{path}' has no key starting with the prefix "
                               "'student.backbone.'; its keys start with ['backbone.', 'head.', "
                               "'teacher.']")
    wide, _ = dino_checkpoint(tmp_path / 'wide.pth', DINOVIM, embed_dims=32)
    with pytest.raises(ValueError, match=r"\(teacher.backbone\) does not match "
                                         r'DinoVim: \d+ tensors have another shape: size '
                                         'mismatch for'):
        build_and_init(DINOVIM, checkpoint=wide, prefix='teacher.backbone.')


@pytest.mark.parametrize('content, message', [
    (b'', 'is empty (0 bytes)'),
    (b'{"not": "a checkpoint"}', "is not a PyTorch checkpoint but text, starting with '{"),
])
def test_empty_and_text_files_are_named(tmp_path, content, message):
    """They failed with EOFError('') and KeyError: 123 inside torch.load."""
    path = tmp_path / 'weights.pth'
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        build_and_init(DINOVIM, checkpoint=str(path))
    assert str(info.value).startswith(f"checkpoint '{path}' {message}")


def test_paper_checkpoint_is_refused_on_a_module_that_is_not_dinovim(tmp_path):
    """Not a 'Pretrained' type, mmengine applies it before the module's own initialisation,
    which re-randomised LinearViT's position embedding and FFN weights after the load."""
    path, _ = dino_checkpoint(tmp_path / 'vit.pth', LINEARVIT)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(dict(LINEARVIT, init_cfg=dict(type='dinomamba_mm.PaperCheckpoint',
                                                           checkpoint=path)))
    with pytest.raises(ValueError, match="PaperCheckpoint loads .*DinoVim.*got a LinearViT"):
        model.init_weights()
