"""Smoke tests of tools/analysis: binary_auc.py on the synthetic ADE-style set and
token_mixing_rank.py on tiny random models (the rank bounds are the oracle)."""
import csv
import os.path as osp
import sys

import numpy as np
import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tools', 'data'))

import make_synthetic  # noqa: E402

sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402


def _tool(name):
    return load_tool(f'tools/analysis/{name}.py')


def _synthetic_ade_and_tiny_dinovim(tmp_path, seed, num_val):
    """The synthetic ADE-style set in tmp_path/synthetic/ade (32 px label maps) and the config
    of a 2-block DinoVim; returns the config's path."""
    make_synthetic.make_synthetic(str(tmp_path / 'synthetic'), seed=seed, num_train=1,
                                  num_val=num_val, seg_size=32, layouts=['ade'])
    model_cfg = tmp_path / 'tiny_dinovim.py'
    model_cfg.write_text(
        "default_scope = 'mmpretrain'\n"
        "model = dict(backbone=dict(type='dinomamba_mm.DinoVim', arch=dict(embed_dims=32, "
        "num_layers=2, headdim=16, d_state=8, chunk_size=64), img_size=64, patch_size=16, "
        "drop_path_rate=0.))\n")
    return model_cfg


def test_binary_auc_tool_on_synthetic_ade(tmp_path, capsys):
    model_cfg = _synthetic_ade_and_tiny_dinovim(tmp_path, seed=1, num_val=3)
    tool = _tool('binary_auc')
    # a DINO-style checkpoint: the tool must pick the teacher's weights
    backbone = tool.build_backbone(tool.Config.fromfile(str(model_cfg)))
    state = {f'teacher.backbone.{k}': v for k, v in backbone.state_dict().items()}
    state.update({f'backbone.{k}': torch.zeros_like(v) for k, v in backbone.state_dict().items()})
    torch.save(dict(state_dict=state), tmp_path / 'dino.pth')
    out = tmp_path / 'out'
    tool.main([str(model_cfg), '--checkpoint', str(tmp_path / 'dino.pth'),
               '--data-config', osp.join(REPO, 'configs/_base_/datasets/synthetic_ade.py'),
               '--data-root', str(tmp_path / 'synthetic' / 'ade'), '--out-dir', str(out),
               '--map-type', 'attention', '--layers', '0', '-1', '--show', '2',
               '--mode', 'binned'])
    printed = capsys.readouterr().out
    assert "(from teacher.backbone)" in printed
    with open(out / 'binary_auc.csv') as f:
        rows = list(csv.DictReader(f))
    assert [(r['layer'], r['map']) for r in rows] == [
        (layer, f'head{h}') for layer in ('0', '1') for h in range(4)]
    assert all(0 <= float(r['auc_mean']) <= 1 and 0 <= float(r['pooled_auc']) <= 1
               for r in rows)
    assert int(rows[0]['num_evaluated']) + int(rows[0]['num_skipped']) == 3
    table = (out / 'binary_auc.md').read_text()
    assert table.startswith('| layer | head0 | head1 | head2 | head3 | mean |')
    assert f'| 1 | {float(rows[4]["auc_mean"]):.4f} |' in table
    assert (out / 'roc.png').stat().st_size > 0
    assert len(list(out.glob('overlay_*.png'))) == 2
    # the shown scenes for side-by-side figures: maps at the label size (32 px), masks, AUCs
    with np.load(out / 'maps.npz') as shown:
        assert shown['scores'].shape == shown['masks'].shape == (2, 32, 32)
        assert set(np.unique(shown['masks'])) <= {0.0, 0.5, 1.0}
        assert all(0 <= auc <= 1 for auc in shown['aucs'])
        assert [osp.basename(p) for p in shown['img_paths']] == [
            f'synthetic_val_{i:06d}.jpg' for i in range(3)
            if osp.isfile(out / f'overlay_{i:03d}.png')]


def test_token_mixing_rank_tool_shows_the_bounds_and_the_hierarchy(tmp_path):
    tool = _tool('token_mixing_rank')
    # L = 1 + 8 * 8 = 65 tokens, C = 16; D_QK = N = 32 / 4 = 8 < C
    rows = tool.main(['--out-dir', str(tmp_path), '--img-size', '64', '--patch-size', '8',
                      '--embed-dims', '32', '--num-heads', '4', '--depth', '1'])
    by_mixer = {row['mixer']: row for row in rows}
    assert set(by_mixer) == {'softmax', 'linear', 'forward', 'backward', 'combined'}
    assert all(row['C'] == 16 for row in rows)
    assert by_mixer['linear']['rank_whole'] <= 8 and by_mixer['linear']['rank_lower'] <= 8
    assert by_mixer['forward']['rank_lower'] <= 8 and by_mixer['forward']['rank_upper'] == 0
    assert by_mixer['backward']['rank_upper'] <= 8 and by_mixer['backward']['rank_lower'] == 0
    assert by_mixer['softmax']['rank_lower'] > 8
    assert by_mixer['softmax']['rank_all_blocks'] > by_mixer['combined']['rank_all_blocks'] \
        > by_mixer['linear']['rank_all_blocks']
    table = (tmp_path / 'token_mixing_rank.md').read_text()
    assert ': holds' in table
    assert (tmp_path / 'spectra.png').stat().st_size > 0
    with open(tmp_path / 'token_mixing_rank.csv') as f:
        assert len(list(csv.DictReader(f))) == 5


def test_token_mixing_rank_tool_rejects_bad_model_spec(tmp_path):
    tool = _tool('token_mixing_rank')
    with pytest.raises(ValueError, match='NAME=CONFIG'):
        tool.main(['--out-dir', str(tmp_path), '--model', 'configs/x.py'])


def test_binary_auc_tool_in_batches_scores_each_image_as_one_at_a_time(tmp_path):
    """Batches of 3 over the first 5 of 6 scenes (the second batch cut to 2) give each image the
    AUCs it gets in a forward pass of its own, and the overlays keep the images' numbers."""
    model_cfg = _synthetic_ade_and_tiny_dinovim(tmp_path, seed=2, num_val=6)
    tool = _tool('binary_auc')
    torch.manual_seed(0)
    backbone = tool.build_backbone(tool.Config.fromfile(str(model_cfg)))
    torch.save(dict(state_dict={f'backbone.{k}': v for k, v in backbone.state_dict().items()}),
               tmp_path / 'model.pth')
    summaries, overlays = {}, {}
    for batch_size in (1, 3):
        out = tmp_path / f'out{batch_size}'
        summaries[batch_size] = tool.main([
            str(model_cfg), '--checkpoint', str(tmp_path / 'model.pth'),
            '--data-config', osp.join(REPO, 'configs/_base_/datasets/synthetic_ade.py'),
            '--data-root', str(tmp_path / 'synthetic' / 'ade'), '--out-dir', str(out),
            '--layers', '0', '1', '--num-images', '5', '--show', '5',
            '--batch-size', str(batch_size)])
        overlays[batch_size] = sorted(p.name for p in out.glob('overlay_*.png'))
    one, batched = summaries[1], summaries[3]
    assert one['num_images'] == batched['num_images'] == 5
    np.testing.assert_allclose(batched['per_image'], one['per_image'], rtol=0, atol=1e-6)
    np.testing.assert_allclose(batched['auc'], one['auc'], rtol=0, atol=1e-6)
    assert overlays[3] == overlays[1] and overlays[1]  # named by image, not by batch


def test_binary_auc_tool_names_a_batch_of_mixed_sizes():
    """mmseg's preprocessor asserted without naming the option that made the batch."""
    check = _tool('binary_auc').check_one_size
    check([torch.zeros(3, 32, 48), torch.zeros(3, 32, 48)], 2)
    with pytest.raises(ValueError, match=r'--batch-size 2: .*\(32, 48\), \(40, 48\).*one size'):
        check([torch.zeros(3, 32, 48), torch.zeros(3, 40, 48)], 2)


@pytest.mark.parametrize('name, argv, message', [
    ('token_mixing_rank', ['--block-size', '0'], '--block-size must be an int >= 1, got 0'),
    ('token_mixing_rank', ['--num-images', '0'], '--num-images must be an int >= 1, got 0'),
    ('token_mixing_rank', ['--depth', '0'], '--depth must be an int >= 1, got 0'),
    ('token_mixing_rank', ['--img-size', '-8'], '--img-size must be an int >= 1, got -8'),
    ('binary_auc', ['config.py', '--num-images', '-3'],
     '--num-images must be an int >= 1, got -3'),
    ('binary_auc', ['config.py', '--show', '-1'], '--show must be an int >= 0, got -1'),
    ('binary_auc', ['config.py', '--batch-size', '0'], '--batch-size must be an int >= 1, got 0'),
])
def test_analysis_tools_name_bad_numbers(tmp_path, name, argv, message):
    """--block-size 0 fell back to the default, --num-images 0 failed inside torch.stack, and
    binary_auc.py --num-images -3 scored no image."""
    with pytest.raises(ValueError) as info:
        _tool(name).parse_args(argv + ['--out-dir', str(tmp_path)])
    assert str(info.value) == message
