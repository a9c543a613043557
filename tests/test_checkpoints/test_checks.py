"""The checks every checkpoint load runs: integrity, non-finite tensors, token layout,
teacher vs student, an output that would overwrite its input, and files that are no checkpoint.

Each case used to load (or write) without a word.
"""
import os
import os.path as osp
import sys
import zipfile

import pytest
import torch
from mmengine.registry import DefaultScope

import dinomamba_mm  # noqa: F401
from dinomamba_mm.checkpoints import (load_checkpoint_into, load_state_dict_checked,
                                     read_checkpoint)
from dinomamba_mm.registry import MODELS

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.paper_files import paper_backbone, paper_dino_checkpoint  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

TINY = dict(type='dinomamba_mm.DinoVim', img_size=32, patch_size=16,
            arch=dict(embed_dims=32, num_layers=1, headdim=16, d_state=8))
LAYOUTS = 'backbone_layouts'


def dino_checkpoint(path, token_layout='interleaved', teacher=True):
    """An mmengine DINO checkpoint whose teacher (and student) record ``token_layout``."""
    torch.manual_seed(0)
    weights = MODELS.build(dict(TINY, token_layout=token_layout)).state_dict()
    record = dict(type='DinoVim', token_layout=token_layout, pos_embed_grid=[2, 2])
    state = {f'backbone.{k}': v for k, v in weights.items()}
    records = {'backbone': record}
    if teacher:
        state.update({f'teacher.backbone.{k}': v + 1 for k, v in weights.items()})
        records['teacher.backbone'] = record
    torch.save(dict(state_dict=state, meta={LAYOUTS: records}), str(path))
    return str(path)


def flip_bytes_in_a_tensor(path, count=64):
    """Flip ``count`` bytes in the middle of the largest tensor record of a torch zip file."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if '/data/' in i.filename),
                   key=lambda i: i.file_size)
    with open(path, 'rb') as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(f.read(2), 'little') for _ in range(2))
    start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2 - count // 2
    with open(path, 'r+b') as f:
        f.seek(start)
        data = f.read(count)
        f.seek(start)
        f.write(bytes(b ^ 0xFF for b in data))
    return info.filename


def pretrained(path, token_layout='paper', **init_cfg):
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(dict(TINY, token_layout=token_layout, init_cfg=dict(
            type='Pretrained', checkpoint=path, **init_cfg)))
    model.init_weights()
    return model


def test_a_tensor_with_flipped_bytes_fails_the_crc(tmp_path):
    path = dino_checkpoint(tmp_path / 'dino.pth')
    record = flip_bytes_in_a_tensor(path)
    with pytest.raises(ValueError) as error:
        pretrained(path, 'interleaved', prefix='teacher.backbone.')
    message = str(error.value)
    assert path in message and record in message and 'CRC' in message


def test_non_finite_tensors_are_named_unless_allowed(tmp_path):
    path = str(tmp_path / 'nan.pth')
    torch.manual_seed(0)
    weights = MODELS.build(TINY).state_dict()
    weights['layers.0.mixer.D'][0] = float('nan')
    weights['norm_f.weight'][1] = float('inf')
    torch.save(dict(state_dict=weights), path)
    with pytest.raises(ValueError) as error:
        pretrained(path, 'interleaved')
    message = str(error.value)
    assert path in message and 'layers.0.mixer.D' in message and 'norm_f.weight' in message
    assert 'allow_non_finite' in message
    model = pretrained(path, 'interleaved', allow_non_finite=True)
    assert torch.isnan(model.layers[0].mixer.D[0])


def test_pretrained_refuses_a_teacher_of_another_token_layout(tmp_path):
    """PaperCheckpoint and tools/test.py refused it; Pretrained loaded it without a word."""
    path = dino_checkpoint(tmp_path / 'dino.pth', 'interleaved')
    with pytest.raises(ValueError) as error:
        pretrained(path, 'paper', prefix='teacher.backbone.')
    message = str(error.value)
    assert path in message and 'teacher.backbone' in message
    assert "token_layout='interleaved'" in message and "token_layout='paper'" in message
    pretrained(path, 'interleaved', prefix='teacher.backbone.')


def test_extracting_a_checkpoint_without_a_teacher_is_an_error(tmp_path):
    """It wrote the student as 'the teacher', rc 0."""
    src = dino_checkpoint(tmp_path / 'student.pth', teacher=False)
    out = str(tmp_path / 'teacher.pth')
    with pytest.raises(ValueError) as error:
        load_tool('tools/misc/extract_dino_teacher.py').main([src, out])
    assert src in str(error.value) and 'teacher' in str(error.value)
    assert not osp.exists(out)


@pytest.mark.parametrize('tool, extra', [
    ('tools/misc/extract_dino_teacher.py', []),
    ('tools/model_converters/dinomamba_to_mmpretrain.py', []),
])
def test_tools_refuse_to_overwrite_their_input(tmp_path, tool, extra):
    src = str(tmp_path / 'checkpoint.pth')
    if 'extract' in tool:
        dino_checkpoint(src)
    else:
        torch.save(paper_dino_checkpoint(paper_backbone(0), paper_backbone(1)), src)
    before = open(src, 'rb').read()
    os.symlink(src, str(tmp_path / 'link.pth'))
    for out in (src, osp.join(str(tmp_path), '.', 'checkpoint.pth'), str(tmp_path / 'link.pth')):
        with pytest.raises(ValueError, match='overwrite'):
            load_tool(tool).main([src, out, *extra])
    assert open(src, 'rb').read() == before


@pytest.mark.parametrize('tool', ['tools/misc/extract_dino_teacher.py',
                                  'tools/model_converters/dinomamba_to_mmpretrain.py'])
def test_a_conversion_failing_as_it_writes_keeps_the_earlier_output(tmp_path, monkeypatch,
                                                                   tool):
    """The disk fills up while the output is written: the earlier file of that name stays,
    and no partial file is left."""
    src = str(tmp_path / 'checkpoint.pth')
    if 'extract' in tool:
        dino_checkpoint(src)
    else:
        torch.save(paper_dino_checkpoint(paper_backbone(0), paper_backbone(1)), src)
    out = tmp_path / 'out.pth'
    out.write_bytes(b'an earlier good conversion')

    def disk_full(fd):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(os, 'fsync', disk_full)
    with pytest.raises(OSError, match='No space left'):
        load_tool(tool).main([src, str(out)])
    assert out.read_bytes() == b'an earlier good conversion'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['checkpoint.pth', 'out.pth']


def test_the_converter_points_mmengine_checkpoints_to_the_extractor(tmp_path):
    src = dino_checkpoint(tmp_path / 'epoch_100.pth')
    converter = load_tool('tools/model_converters/dinomamba_to_mmpretrain.py')
    with pytest.raises(ValueError, match='extract_dino_teacher.py'):
        converter.main([src, str(tmp_path / 'out.pth')])
    text = tmp_path / 'notes.pth'
    text.write_text('these are my notes\n')
    with pytest.raises(ValueError, match='is not a PyTorch checkpoint but text'):
        converter.main([str(text), str(tmp_path / 'out.pth')])


@pytest.mark.parametrize('content', [b'', b'<!DOCTYPE html><html>Rate limited</html>', 'cut'])
def test_a_bad_model_zoo_cache_file_names_the_url_and_the_path(tmp_path, monkeypatch,
                                                                content):
    from dinomamba_mm.checkpoints import model_zoo
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-tiny']
    cached = model_zoo.cache_path(url)
    os.makedirs(osp.dirname(cached))
    if content == 'cut':
        torch.save(paper_dino_checkpoint(paper_backbone(0), paper_backbone(1)), cached)
        with open(cached, 'r+b') as f:
            f.truncate(os.path.getsize(cached) // 2)
    else:
        with open(cached, 'wb') as f:
            f.write(content)
    with pytest.raises(ValueError) as error:
        read_checkpoint(url)
    message = str(error.value)
    assert url in message and cached in message and 'Delete that file' in message


@pytest.mark.parametrize('name', ['dinovim', 'linearvit', 'vit'])
def test_checkpoints_written_by_earlier_code_still_load(name):
    """checkpoints/demo/*.pth were written before these checks existed (the LinearViT and ViT
    ones without a layout record): each passes every check and fills its backbone strictly."""
    from mmengine.config import Config

    from dinomamba_mm.analysis.backbone_loading import build_backbone
    from dinomamba_mm.checkpoints import load_checkpoint_into
    path = osp.join(ROOT, 'checkpoints', 'demo', f'{name}.pth')
    saved = torch.load(path, weights_only=True)['state_dict']
    backbone = build_backbone(Config.fromfile(
        osp.join(ROOT, 'configs', 'demo', f'dino_{name}-demo_synthetic.py')))
    assert load_checkpoint_into(backbone, path).module_path == 'backbone'
    for key, value in backbone.state_dict().items():
        assert torch.equal(value, saved[f'backbone.{key}']), key


def test_a_checked_file_is_read_once_until_it_changes(tmp_path, monkeypatch):
    """tools/test.py checks the file before building the model and the Runner loads it: its
    records' CRCs are read once; a change to the file is seen again."""
    path = dino_checkpoint(tmp_path / 'dino.pth')
    os.utime(path, (os.path.getatime(path) - 10, os.path.getmtime(path) - 10))
    reads = []
    testzip = zipfile.ZipFile.testzip
    monkeypatch.setattr(zipfile.ZipFile, 'testzip',
                        lambda archive: reads.append(archive.filename) or testzip(archive))
    dinomamba_mm.checkpoints.check_checkpoint_file(path)
    read_checkpoint(path)
    assert reads == [path]
    record = flip_bytes_in_a_tensor(path)
    with pytest.raises(ValueError, match=f'{record}.*CRC'):
        read_checkpoint(path)


def test_entries_that_are_not_tensors_are_named(tmp_path):
    """A list or a number among the weights crashed inside the loaders
    (AttributeError: 'list' object has no attribute 'shape')."""
    weights = MODELS.build(TINY).state_dict()
    path = str(tmp_path / 'odd.pth')
    torch.save({'state_dict': {**weights, 'pos_embed': [1., 2.], 'norm_f.weight': 3.}}, path)
    for load in (lambda: pretrained(path, token_layout='interleaved'),
                 lambda: load_checkpoint_into(MODELS.build(TINY), path, prefix=None),
                 lambda: load_state_dict_checked(MODELS.build(TINY), torch.load(path)[
                     'state_dict'], f'checkpoint {path!r}', strict=True)):
        with pytest.raises(ValueError) as info:
            load()
        assert (f"checkpoint '{path}'" in str(info.value)
                and '2 entries are not tensors: [pos_embed (list), norm_f.weight (float)]; '
                'expected a state dict of tensors' in str(info.value))


@pytest.mark.parametrize('dtype', [torch.int64, torch.bool, torch.complex64])
def test_weights_of_another_kind_of_dtype_are_refused(tmp_path, dtype):
    """An integer, bool or complex tensor for a float parameter was cast silently (rounded
    values; the imaginary part dropped with a warning)."""
    weights = MODELS.build(TINY).state_dict()
    weights['norm_f.weight'] = (weights['norm_f.weight'] * 10).to(dtype)
    weights['pos_embed'] = weights['pos_embed'].double()  # float -> float: torch casts, fine
    path = str(tmp_path / 'dtype.pth')
    torch.save({'state_dict': weights}, path)
    with pytest.raises(ValueError) as info:
        load_checkpoint_into(MODELS.build(TINY), path, prefix=None)
    assert str(info.value) == (
        f"checkpoint '{path}' does not match DinoVim: 1 tensors have another kind of dtype: "
        f'norm_f.weight: {str(dtype)[6:]} in the checkpoint, float32 in the model '
        '(floating-point, integer, bool and complex tensors load only from their own kind)')


def test_a_checkpoint_given_as_a_path_object_or_as_something_else(tmp_path):
    """A pathlib.Path was taken for a loaded checkpoint ('checkpoint holds a PosixPath,
    expected a dict'); None or a number said the same."""
    import pathlib
    path = dino_checkpoint(tmp_path / 'dino.pth')
    model = MODELS.build(dict(TINY, token_layout='interleaved'))
    assert load_checkpoint_into(model, pathlib.Path(path)).module_path == 'teacher.backbone'
    for bad in (None, 3):
        with pytest.raises(TypeError) as info:
            load_checkpoint_into(model, bad)
        assert str(info.value) == ('checkpoint must be a path or URL (str or os.PathLike) or a '
                                   f'loaded checkpoint (a dict), got {bad!r}')
