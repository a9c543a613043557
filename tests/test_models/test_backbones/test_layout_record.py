"""Token layout and position-embedding grid recorded in checkpoint meta, and checked on load."""
import os.path as osp
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config

from dinomamba_mm.checkpoints import layout, model_layouts
from dinomamba_mm.engine.safeguards import BackboneLayoutHook
from dinomamba_mm.models.backbones import FrozenBackbone
from dinomamba_mm.registry import MODELS

sys.path.insert(0, osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))))
from helpers.paper_files import ours_to_paper  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

TINY = dict(type='dinomamba_mm.DinoVim', arch=dict(embed_dims=32, num_layers=1, headdim=16,
                                                    d_state=8), img_size=32, patch_size=16)
PAPER = dict(token_layout='paper')
INTERLEAVED = dict(token_layout='interleaved')


class TinyDINO(nn.Module):
    """Module paths of a DINO model: student 'backbone', EMA teacher 'teacher.backbone'."""

    def __init__(self, **layout):
        super().__init__()
        self.backbone = MODELS.build(dict(TINY, **layout))
        self.teacher = nn.ModuleDict(dict(backbone=MODELS.build(dict(TINY, **layout))))


def _runner(model, load_from=None):
    return SimpleNamespace(model=model, cfg=Config(dict(load_from=load_from)))


def _saved_by_runner(model, path):
    """A checkpoint as mmengine's runner writes it, through the hook."""
    checkpoint = dict(meta=dict(epoch=1), state_dict=model.state_dict())
    BackboneLayoutHook().before_save_checkpoint(_runner(model), checkpoint)
    torch.save(checkpoint, path)
    return checkpoint


def test_records_name_every_backbone_by_module_path():
    records = model_layouts(TinyDINO(**PAPER))
    expected = dict(type='DinoVim', token_layout='paper', pos_embed_grid=[2, 2])
    assert records == {'backbone': expected, 'teacher.backbone': expected}


@pytest.mark.parametrize('saved, loaded', [(PAPER, INTERLEAVED), (INTERLEAVED, PAPER)])
def test_frozen_backbone_refuses_a_teacher_of_another_layout(tmp_path, saved, loaded):
    path = str(tmp_path / 'epoch_100.pth')
    _saved_by_runner(TinyDINO(**saved), path)
    probe = FrozenBackbone(dict(TINY, **loaded), checkpoint=path)
    with pytest.raises(ValueError) as error:
        probe.init_weights()
    message = str(error.value)
    assert path in message and 'teacher.backbone' in message
    assert f"token_layout={saved['token_layout']!r}" in message
    assert f"token_layout={loaded['token_layout']!r}" in message
    same = FrozenBackbone(dict(TINY, **saved), checkpoint=path)
    same.init_weights()  # the matching layout loads


def test_a_refused_layout_of_another_grid_names_the_img_size_too(tmp_path):
    path = str(tmp_path / 'epoch_100.pth')
    _saved_by_runner(TinyDINO(**INTERLEAVED), path)  # 2 x 2 grid of 16 px patches
    probe = FrozenBackbone(dict(TINY, img_size=16, **PAPER), checkpoint=path)
    with pytest.raises(ValueError, match=r"token_layout='interleaved' and img_size=32 "
                                         r"\(its 2 x 2 grid of 16 px patches\)"):
        probe.init_weights()


def test_raw_paper_files_are_paper(tmp_path):
    teacher = MODELS.build(dict(TINY, **PAPER)).state_dict()
    path = str(tmp_path / 'checkpoint.pth')
    paper = {f'backbone.{k}': v for k, v in ours_to_paper(teacher).items()}
    torch.save(dict(teacher=paper, student={}), path)
    with pytest.raises(ValueError, match="token_layout='paper'"):
        FrozenBackbone(dict(TINY, **INTERLEAVED), checkpoint=path).init_weights()
    FrozenBackbone(dict(TINY, **PAPER), checkpoint=path).init_weights()


def test_an_unrecorded_checkpoint_loads_with_a_warning(tmp_path, monkeypatch):
    logged = []
    monkeypatch.setattr(layout, 'print_log', lambda msg, **kwargs: logged.append(msg))
    model = TinyDINO(**INTERLEAVED)
    path = str(tmp_path / 'old.pth')
    torch.save(dict(meta=dict(epoch=1), state_dict=model.state_dict()), path)
    FrozenBackbone(dict(TINY, **INTERLEAVED), checkpoint=path).init_weights()
    assert len(logged) == 1 and path in logged[0] and 'no token layout' in logged[0]


def test_extract_tool_keeps_the_teachers_record(tmp_path):
    src, out, plain = (str(tmp_path / name) for name in ('dino.pth', 'teacher.pth', 'plain.pth'))
    _saved_by_runner(TinyDINO(**PAPER), src)
    tool = load_tool('tools/misc/extract_dino_teacher.py')
    tool.main([src, out])
    tool.main([src, plain, '--plain'])
    record = dict(type='DinoVim', token_layout='paper', pos_embed_grid=[2, 2])
    assert torch.load(out)['meta']['backbone_layouts'] == {'backbone': record}
    assert torch.load(plain)['meta']['backbone_layouts'] == {'': record}
    with pytest.raises(ValueError, match="token_layout='paper'"):
        FrozenBackbone(dict(TINY, **INTERLEAVED), checkpoint=out).init_weights()


def test_hook_checks_what_the_runner_loads(tmp_path):
    path = str(tmp_path / 'epoch_1.pth')
    checkpoint = _saved_by_runner(TinyDINO(**PAPER), path)
    hook = BackboneLayoutHook()
    hook.after_load_checkpoint(_runner(TinyDINO(**PAPER), path), checkpoint)
    with pytest.raises(ValueError) as error:
        hook.after_load_checkpoint(_runner(TinyDINO(**INTERLEAVED), path), checkpoint)
    assert path in str(error.value) and "token_layout='interleaved'" in str(error.value)
    # a checkpoint without weights of the backbone (a linear head only) is not checked
    head_only = dict(state_dict={'module.linear.weight': torch.zeros(2, 2)})
    hook.after_load_checkpoint(_runner(TinyDINO(**INTERLEAVED), path), head_only)
