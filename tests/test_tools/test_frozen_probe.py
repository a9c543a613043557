"""tools/benchmarks/frozen_probe.py: the probe against hand-derived accuracies, the teacher
weights it loads, and its errors on bad input."""
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

frozen_probe = load_tool('tools/benchmarks/frozen_probe.py')


def test_probe_accuracy_of_separable_and_of_uninformative_features():
    labels_train = np.array([0] * 14 + [1] * 8 + [2] * 8)
    labels_val = np.array([0, 0, 0, 1, 2])
    onehot = np.eye(3)
    # features that are the label: every val image right
    assert frozen_probe.probe((onehot[labels_train], labels_train),
                              (onehot[labels_val], labels_val), [1.0]) == [100.0]
    # a constant feature: the majority class of the training labels (0) for everything,
    # which is 3 of the 5 val labels
    constant_train, constant_val = np.ones((30, 2)), np.ones((5, 2))
    assert frozen_probe.probe((constant_train, labels_train), (constant_val, labels_val),
                              [0.1, 1.0]) == [60.0, 60.0]


def test_teacher_weights_are_loaded(tmp_path):
    from mmengine.config import Config
    cfg = Config.fromfile(frozen_probe.DEFAULT_CONFIG)
    random_init = frozen_probe.build_backbone(cfg, 'random')
    state = {f'teacher.backbone.{k}': torch.full_like(v, 0.5)
             for k, v in random_init.backbone.state_dict().items()}
    torch.save(dict(state_dict=state), tmp_path / 'dino.pth')
    loaded = frozen_probe.build_backbone(cfg, str(tmp_path / 'dino.pth'))
    assert all(torch.equal(v, torch.full_like(v, 0.5))
               for v in loaded.backbone.state_dict().values())
    assert not torch.equal(random_init.backbone.pos_embed, loaded.backbone.pos_embed)


def test_random_init_seeds():
    from mmengine.config import Config
    cfg = Config.fromfile(frozen_probe.DEFAULT_CONFIG)
    weights = {spec: frozen_probe.build_backbone(cfg, spec).backbone.patch_embed.projection.weight
               for spec in ('random', 'random:0', 'random:1')}
    assert torch.equal(weights['random'], weights['random:0'])
    assert not torch.equal(weights['random'], weights['random:1'])


def test_table_on_synthetic_data(tmp_path, capsys):
    root = tmp_path / 'synthetic'
    make_synthetic.make_synthetic(str(root), seed=0, num_train=14, num_val=7, size=32,
                                  layouts=['cls'])
    frozen_probe.main(['random', '--data-root', str(root / 'cls'), '--size', '16',
                       '--c', '0.5', '--cfg-options', 'model.backbone.backbone.img_size=16'])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith('| random')]
    assert len(rows) == 1
    accuracy = float(rows[0].split('|')[2])
    assert accuracy in {round(100 * k / 7, 1) for k in range(8)}


@pytest.mark.parametrize('argv, message', [
    (['random', '--data-root', '/nonexistent', '--size', '32'], '/nonexistent'),
    (['missing.pth', '--data-root', '.', '--size', '32'], 'missing.pth'),
    (['random', '--data-root', '.', '--size', '4'], '--size'),
    (['random', '--data-root', '.', '--size', '32', '--c', '0'], '--c'),
    (['random:x', '--data-root', '.', '--size', '32'], 'random:x'),
])
def test_bad_input_names_the_argument(argv, message, capsys):
    with pytest.raises((SystemExit, ValueError)) as error:
        frozen_probe.main(argv)
    text = str(error.value) + capsys.readouterr().err
    assert message in text
