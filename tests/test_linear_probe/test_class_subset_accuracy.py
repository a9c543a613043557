import pytest
import torch

from dinomamba_mm.evaluation.metrics.class_subset_accuracy import (
    ClassSubsetAccuracy, read_imagenet_wnids, subset_class_indices,
    subset_topk_accuracy)

WNIDS = ['n00000001', 'n00000002', 'n00000003', 'n00000004', 'n00000005']


def test_read_wnids_from_folders_and_from_synset_file(tmp_path):
    for wnid in reversed(WNIDS):
        (tmp_path / 'train' / wnid).mkdir(parents=True)
    (tmp_path / 'train' / 'README.txt').write_text('not a class')
    assert read_imagenet_wnids(str(tmp_path / 'train')) == WNIDS
    mapping = tmp_path / 'LOC_synset_mapping.txt'
    mapping.write_text(''.join(f'{w} name {i}, other\n'
                               for i, w in enumerate(WNIDS)))
    assert read_imagenet_wnids(str(mapping)) == WNIDS
    with pytest.raises(ValueError, match='non-wnid'):
        bad = tmp_path / 'bad.txt'
        bad.write_text('tench\n')
        read_imagenet_wnids(str(bad))


def test_subset_indices_and_unknown_wnid():
    assert subset_class_indices(['n00000002', 'n00000005'], WNIDS) == [1, 4]
    with pytest.raises(ValueError, match='not ImageNet classes'):
        subset_class_indices(['n99999999'], WNIDS)


def test_restricted_argmax_hand_computed():
    # subset = full classes 1 and 4 (subset labels 0 and 1).
    scores = torch.tensor([
        [9.0, 1.0, 0.0, 0.0, 2.0],  # full argmax 0 (outside); subset -> 1
        [0.0, 5.0, 7.0, 0.0, 3.0],  # subset -> 0
        [0.0, 0.5, 0.0, 0.0, 0.2],  # subset -> 0
    ])
    labels = torch.tensor([1, 1, 0])
    top1, top2 = subset_topk_accuracy(scores, labels, [1, 4], topk=(1, 2))
    assert top1 == pytest.approx(200.0 / 3)
    assert top2 == pytest.approx(100.0)
    # top-5 of a 2-class subset is undefined: said, not an index error from torch.topk
    with pytest.raises(ValueError, match=r'topk \(1, 5\) needs at least 5 classes.*got 2'):
        subset_topk_accuracy(scores, labels, [1, 4], topk=(1, 5))


def test_metric_reads_subset_from_dataset_meta(tmp_path):
    mapping = tmp_path / 'wnids.txt'
    mapping.write_text('\n'.join(WNIDS))
    metric = ClassSubsetAccuracy(imagenet_wnids=str(mapping))
    metric.dataset_meta = dict(classes=('n00000002', 'n00000005'))
    metric.process(None, [
        dict(pred_score=torch.tensor([9.0, 1.0, 0.0, 0.0, 2.0]),
             gt_label=torch.tensor([1])),
        dict(pred_score=torch.tensor([0.0, 5.0, 7.0, 0.0, 3.0]),
             gt_label=torch.tensor([1])),
    ])
    assert metric.evaluate(2) == {'subset/top1': pytest.approx(50.0)}
    with pytest.raises(ValueError, match='pred_score has 3 classes'):
        metric.process(None, [dict(pred_score=torch.zeros(3),
                                   gt_label=torch.tensor([0]))])


def test_folder_dataset_meta_feeds_the_metric(tmp_path):
    # an ImageNet-A-like layout: the dataset's classes are its sorted wnid folders
    from mmpretrain.datasets import CustomDataset
    from PIL import Image
    for wnid in ('n00000005', 'n00000002'):
        (tmp_path / 'subset' / wnid).mkdir(parents=True)
        Image.new('RGB', (4, 4)).save(tmp_path / 'subset' / wnid / 'a.jpg')
    dataset = CustomDataset(data_root=str(tmp_path / 'subset'), pipeline=[])
    assert dataset.metainfo['classes'] == ('n00000002', 'n00000005')
    mapping = tmp_path / 'wnids.txt'
    mapping.write_text('\n'.join(WNIDS))
    metric = ClassSubsetAccuracy(imagenet_wnids=str(mapping))
    metric.dataset_meta = dataset.metainfo
    # label 1 = n00000005 = full class 4; scores favour full class 4 among {1, 4}
    metric.process(None, [dict(pred_score=torch.tensor([9.0, 1.0, 0.0, 0.0, 2.0]),
                               gt_label=torch.tensor([dataset.get_gt_labels()[1]]))])
    assert dataset.get_gt_labels()[1] == 1
    assert metric.evaluate(1) == {'subset/top1': pytest.approx(100.0)}


def test_accuracy_is_the_exact_fraction():
    """1 hit in 3: 100 / 3 (the float32 mean gave 33.33333432674408)."""
    from dinomamba_mm.evaluation.metrics.class_subset_accuracy import subset_topk_accuracy
    scores = torch.tensor([[0., 1.], [1., 0.], [1., 0.]])
    assert subset_topk_accuracy(scores, torch.tensor([1, 1, 1]), [0, 1]) == [100 * 1 / 3]


def test_an_empty_class_order_is_named(tmp_path):
    """'gave 0 entries with non-wnid names []' said nothing of what was wrong."""
    from dinomamba_mm.evaluation.metrics.class_subset_accuracy import read_imagenet_wnids
    with pytest.raises(ValueError, match=f"imagenet_wnids '{tmp_path}' is a directory without "
                                         'class folders; expected'):
        read_imagenet_wnids(str(tmp_path))
    (tmp_path / 'synsets.txt').write_text('')
    with pytest.raises(ValueError, match='is an empty file; expected'):
        read_imagenet_wnids(str(tmp_path / 'synsets.txt'))
