import os.path as osp
import sys

import pytest
import torch

from dinomamba_mm.models.backbones import DinoVim
from dinomamba_mm.models.backbones.frozen_backbone import FrozenBackbone

sys.path.insert(0, osp.join(osp.dirname(__file__), '..'))
from helpers.paper_files import ours_to_paper  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

TINY = dict(type='dinomamba_mm.DinoVim',
            arch=dict(embed_dims=32, num_layers=1, headdim=16, d_state=8),
            img_size=16, patch_size=8)


def _tool():
    return load_tool('tools/misc/extract_dino_teacher.py')


def _random_state(seed):
    torch.manual_seed(seed)
    model = DinoVim(**{k: v for k, v in TINY.items() if k != 'type'})
    return {k: torch.randn_like(v) for k, v in model.state_dict().items()}


def test_our_dino_checkpoint_to_backbone_checkpoint(tmp_path):
    student, teacher = _random_state(0), _random_state(1)
    state = {f'backbone.{k}': v for k, v in student.items()}
    state.update({f'teacher.backbone.{k}': v for k, v in teacher.items()})
    state['teacher.neck.w'] = torch.zeros(2)
    state['head.center'] = torch.zeros(1, 4)
    src = tmp_path / 'dino.pth'
    torch.save(dict(state_dict=state, meta=dict(epoch=7, iter=70)), src)

    out = tmp_path / 'teacher.pth'
    _tool().main([str(src), str(out)])
    saved = torch.load(out, weights_only=False)
    assert saved['meta']['epoch'] == 7
    assert set(saved['state_dict']) == {f'backbone.{k}' for k in teacher}
    for key, value in teacher.items():
        assert torch.equal(saved['state_dict'][f'backbone.{key}'], value)

    # the written checkpoint feeds the linear probe's FrozenBackbone
    frozen = FrozenBackbone(TINY, checkpoint=str(out))
    frozen.init_weights()
    for key, value in frozen.backbone.state_dict().items():
        assert torch.equal(value, teacher[key])

    plain = tmp_path / 'plain.pth'
    _tool().main([str(src), str(plain), '--plain'])
    assert set(torch.load(plain, weights_only=False)['state_dict']) == set(teacher)


def test_paper_layout_teacher_is_renamed(tmp_path):
    teacher = _random_state(2)
    paper = {f'backbone.{k}': v for k, v in ours_to_paper(teacher).items()}
    assert any(k.startswith('backbone.patch_embed.proj.') for k in paper)
    paper['head.mlp.0.weight'] = torch.zeros(3, 3)
    src = tmp_path / 'checkpoint.pth'
    torch.save(dict(teacher=paper, student={}, epoch=99), src)
    out = tmp_path / 'teacher.pth'
    _tool().main([str(src), str(out), '--plain'])
    saved = torch.load(out, weights_only=False)
    assert saved['meta']['epoch'] == 99
    assert set(saved['state_dict']) == set(teacher)
    for key, value in teacher.items():
        assert torch.equal(saved['state_dict'][key], value)


def test_checkpoint_without_teacher_names_it(tmp_path):
    src = tmp_path / 'classifier.pth'
    torch.save(dict(state_dict={'head.fc.weight': torch.zeros(2, 2)}), src)
    with pytest.raises(ValueError) as info:
        _tool().main([str(src), str(tmp_path / 'out.pth')])
    assert str(src) in str(info.value) and 'head.fc.weight' in str(info.value)
