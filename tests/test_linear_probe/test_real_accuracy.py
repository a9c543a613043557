import json

import pytest
import torch

from dinomamba_mm.evaluation.metrics.real_accuracy import (ReaLAccuracy,
                                                           real_top1_accuracy,
                                                           val_image_index)


def test_real_top1_hand_computed():
    # image 0: 3 in {3} -> right; image 1: 1 not in {0, 2} -> wrong;
    # image 2: empty set -> skipped; image 3: 0 in {0, 5} -> right. 2 / 3.
    acc = real_top1_accuracy([3, 1, 2, 0], [[3], [0, 2], [], [0, 5]])
    assert acc == pytest.approx(200.0 / 3)


def test_real_top1_rejects_length_mismatch_and_all_empty():
    with pytest.raises(ValueError, match='real_labels has 1'):
        real_top1_accuracy([1, 2], [[1]])
    with pytest.raises(ValueError, match='empty'):
        real_top1_accuracy([1], [[]])


def test_val_image_index():
    assert val_image_index('/d/val/ILSVRC2012_val_00000001.JPEG') == 0
    assert val_image_index('ILSVRC2012_val_00050000.JPEG') == 49999
    with pytest.raises(ValueError, match='not an ImageNet val file name'):
        val_image_index('cat.jpg')


def test_metric_matches_file_order_not_loader_order(tmp_path):
    real = [[1], [2, 3], [], [0]]
    path = tmp_path / 'real.json'
    path.write_text(json.dumps(real))
    metric = ReaLAccuracy(real_json=str(path))

    def sample(number, pred):
        score = torch.zeros(5)
        score[pred] = 1.0
        return dict(img_path=f'val/ILSVRC2012_val_{number:08d}.JPEG',
                    pred_score=score)

    # loader order shuffled: file 4 (pred 0 in {0}: right), file 2 (pred 2 in
    # {2, 3}: right), file 3 (empty: skipped), file 1 (pred 4 not in {1}).
    metric.process(None, [sample(4, 0), sample(2, 2)])
    metric.process(None, [sample(3, 1), sample(1, 4)])
    result = metric.evaluate(4)
    assert result['real/top1'] == pytest.approx(200.0 / 3)


def test_metric_bad_json_path(tmp_path):
    with pytest.raises(ValueError, match='real_json'):
        ReaLAccuracy(real_json=str(tmp_path / 'missing.json'))


@pytest.mark.parametrize('content, problem', [('', 'is empty'),
                                              ('[[1], [2', 'is not valid JSON')])
def test_an_empty_or_broken_real_json_is_named(tmp_path, content, problem):
    """A bare JSONDecodeError named no file."""
    from dinomamba_mm.evaluation.metrics import ReaLAccuracy
    path = tmp_path / 'real.json'
    path.write_text(content)
    with pytest.raises(ValueError, match=f"real_json '{path}' {problem}"):
        ReaLAccuracy(real_json=str(path))
