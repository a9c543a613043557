"""Paper checkpoint -> DinoVim: the converter tool, the key mapping and the strict loader.

The paper checkpoints are rebuilt here from the layout of the paper code (DINO checkpoint.pth with
'teacher' / 'student' state dicts of the MultiCropWrapper), with random values and tiny dims.
"""
import os.path as osp
import sys

import pytest
import torch

from dinomamba_mm.checkpoints import CheckpointError, paper_to_ours
from dinomamba_mm.models.backbones import DinoMambaReg, DinoVim

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.paper_files import (DEPTH, DIM, HEADDIM, STATE,  # noqa: E402
                                 ours_to_paper, paper_backbone, paper_dino_checkpoint)
from helpers.tools import load_tool  # noqa: E402

ARCH = dict(embed_dims=DIM, num_layers=DEPTH, headdim=HEADDIM, d_state=STATE)


def _converter():
    return load_tool('tools/model_converters/dinomamba_to_mmpretrain.py')


def under(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def paper_checkpoint(registers: int = 0) -> dict:
    return paper_dino_checkpoint(paper_backbone(0, registers), paper_backbone(1, registers))


def test_mapping_round_trips_and_drops_the_unused_classifier():
    backbone = paper_backbone(0)
    ours = paper_to_ours(backbone)
    assert 'patch_embed.projection.weight' in ours and 'head.weight' not in ours
    back = ours_to_paper(ours)
    expected = {k: v for k, v in backbone.items() if not k.startswith('head.')}
    assert back.keys() == expected.keys()
    assert all(torch.equal(back[k], expected[k]) for k in expected)

    reg = paper_backbone(2, registers=3)
    ours = paper_to_ours(reg)
    assert ours['register_tokens'] is reg['cls_token']
    torch.testing.assert_close(ours['pos_embed'], torch.cat([reg['pos_embed_cls'],
                                                            reg['pos_embed']], 1))
    back = ours_to_paper(ours)
    assert back.keys() == reg.keys() and all(torch.equal(back[k], reg[k]) for k in reg)


def test_converter_output_loads_strictly_and_matches_the_teacher(tmp_path):
    src, dst = str(tmp_path / 'checkpoint.pth'), str(tmp_path / 'converted.pth')
    ckpt = paper_checkpoint()
    torch.save(ckpt, src)
    _converter().main([src, dst])
    converted = torch.load(dst, weights_only=True)
    assert set(converted) == {'state_dict', 'meta'}
    assert all(k.startswith('backbone.') for k in converted['state_dict'])
    assert converted['meta']['arch'] == dict(ARCH, expand=2, ngroups=1, d_conv=4)
    assert converted['meta']['num_registers'] == 0
    assert converted['meta']['backbone_layouts'] == {
        'backbone': dict(type='DinoVim', token_layout='paper', pos_embed_grid=[14, 14])}
    teacher = under(ckpt['teacher'], 'backbone.')
    torch.testing.assert_close(converted['state_dict']['backbone.patch_embed.projection.weight'],
                               teacher['patch_embed.proj.weight'])

    for checkpoint in (src, dst):  # raw paper checkpoint and converted one
        model = DinoVim(arch=ARCH, token_layout='paper',
                        init_cfg=dict(type='dinomamba_mm.PaperCheckpoint',
                                      checkpoint=checkpoint))
        model.init_weights()
        state = model.state_dict()
        for key, value in teacher.items():
            if not key.startswith('head.'):
                torch.testing.assert_close(state[paper_to_ours({key: value}).popitem()[0]],
                                           value)
    # mmengine's own Pretrained init reads the converted file the same way (non-strictly)
    plain = DinoVim(arch=ARCH, token_layout='paper',
                    init_cfg=dict(type='Pretrained', checkpoint=dst, prefix='backbone.'))
    plain.init_weights()
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in model.state_dict().items())


def test_student_and_registers(tmp_path):
    src, dst = str(tmp_path / 'mambar.pth'), str(tmp_path / 'mambar_student.pth')
    ckpt = paper_checkpoint(registers=12)
    torch.save(ckpt, src)
    _converter().main([src, dst, '--source', 'student'])
    meta = torch.load(dst, weights_only=True)['meta']
    assert meta['num_registers'] == 12 and meta['network'] == 'student'
    assert meta['backbone_layouts']['backbone']['token_layout'] == 'paper'
    model = DinoMambaReg(arch=ARCH, token_layout='paper',
                         init_cfg=dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=src,
                                       source='student'))
    model.init_weights()
    student = under(ckpt['student'], 'module.backbone.')
    torch.testing.assert_close(model.register_tokens, student['cls_token'])
    torch.testing.assert_close(model.pos_embed[:, 12:], student['pos_embed'])


def test_missing_and_unexpected_keys_raise_with_their_names(tmp_path):
    ckpt = paper_checkpoint()
    del ckpt['teacher']['backbone.layers.1.mixer.D_b']
    ckpt['teacher']['backbone.layers.0.mixer.extra_scale'] = torch.ones(1)
    src = str(tmp_path / 'broken.pth')
    torch.save(ckpt, src)
    model = DinoVim(arch=ARCH, token_layout='paper',
                    init_cfg=dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=src))
    with pytest.raises(ValueError, match=r'layers\.1\.mixer\.D_b.*layers\.0\.mixer\.extra_scale'):
        model.init_weights()
    with pytest.raises(ValueError, match=rf"checkpoint '{src}' \(teacher\) does not match "
                                         r'DinoVim: 1 keys of the model are missing: '
                                         r'\[layers\.1\.mixer\.D_b\]'):
        _converter().main([src, str(tmp_path / 'out.pth')])


def test_position_embedding_is_resized_to_the_model_grid_on_load(tmp_path):
    src = str(tmp_path / 'checkpoint.pth')
    ckpt = paper_checkpoint()
    torch.save(ckpt, src)
    model = DinoVim(arch=ARCH, img_size=256, token_layout='paper',
                    init_cfg=dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=src))
    model.init_weights()
    pos = ckpt['teacher']['backbone.pos_embed']
    grid = pos[:, 1:].reshape(1, 14, 14, DIM).permute(0, 3, 1, 2)
    grid = torch.nn.functional.interpolate(grid, scale_factor=(16.1 / 14, 16.1 / 14),
                                           mode='bicubic')
    assert model.pos_embed.shape == (1, 257, DIM)
    torch.testing.assert_close(model.pos_embed[:, 1:], grid.flatten(2).transpose(1, 2))
    torch.testing.assert_close(model.pos_embed[:, :1], pos[:, :1])


@pytest.mark.parametrize('registers', [0, 12])
def test_paper_files_into_another_token_layout_are_an_error(tmp_path, registers):
    """Raw and converted paper files are 'paper': into 'interleaved' they would give wrong
    features (Vim: no second class token; MambaR: another resize convention)."""
    src, dst = str(tmp_path / 'checkpoint.pth'), str(tmp_path / 'converted.pth')
    torch.save(paper_checkpoint(registers), src)
    _converter().main([src, dst])
    for checkpoint in (src, dst):
        model = DinoVim(arch=ARCH, num_registers=registers, token_layout='interleaved',
                        init_cfg=dict(type='dinomamba_mm.PaperCheckpoint',
                                      checkpoint=checkpoint))
        with pytest.raises(ValueError, match=r"token_layout='paper'.*"
                           r"token_layout='interleaved'") as error:
            model.init_weights()
        assert checkpoint in str(error.value)


def test_a_resized_position_embedding_is_logged(tmp_path, monkeypatch):
    from dinomamba_mm.models.backbones import dinovim
    logged = []
    monkeypatch.setattr(dinovim, 'print_log', lambda msg, **kwargs: logged.append(msg))
    src = str(tmp_path / 'checkpoint.pth')
    torch.save(paper_checkpoint(), src)
    kept = DinoVim(arch=ARCH, token_layout='paper',
                   init_cfg=dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=src))
    kept.init_weights()
    assert logged == []
    resized = DinoVim(arch=ARCH, img_size=256, token_layout='paper',
                      init_cfg=dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=src))
    resized.init_weights()
    assert len(logged) == 1 and '14x14' in logged[0] and '16x16' in logged[0]
    assert 'img_size=224' in logged[0]



def test_non_finite_weights_are_refused_without_verify_too(tmp_path):
    """The converter checks finiteness itself, as the extractor does, not only through the
    strict load that --no-verify skips."""
    ckpt = paper_checkpoint()
    ckpt['teacher']['backbone.norm_f.weight'][0] = float('nan')
    src, dst = str(tmp_path / 'nan.pth'), str(tmp_path / 'out.pth')
    torch.save(ckpt, src)
    with pytest.raises(CheckpointError, match='NaN or Inf.*norm_f.weight'):
        _converter().main([src, dst, '--no-verify'])
    assert not osp.exists(dst)
