"""check_dataset_paths (tools/train.py and tools/test.py run it before building anything):
missing, empty and listless dataset paths, each named with the config fields it came from."""
import pytest

import dinomamba_mm  # noqa: F401
from dinomamba_mm.engine.safeguards import check_dataset_paths


def _cfg(**dataset):
    return dict(train_dataloader=dict(dataset=dict(type='CustomDataset', **dataset)))


def test_missing_paths_name_the_fields_they_come_from(tmp_path):
    root = str(tmp_path / 'nowhere')
    with pytest.raises(FileNotFoundError) as info:
        check_dataset_paths(_cfg(data_root=root, ann_file='meta/train.txt', data_prefix='train'))
    assert (f"train_dataloader.dataset (CustomDataset): missing ['{root}' (data_root), "
            f"'{root}/meta/train.txt' (data_root + ann_file), '{root}/train' (data_root + "
            "data_prefix)]") in str(info.value)


def test_an_empty_annotation_file_is_named(tmp_path):
    """mmpretrain's CustomDataset failed with 'need at least one array to concatenate'."""
    (tmp_path / 'ann.txt').write_text('\n')
    with pytest.raises(ValueError) as info:
        check_dataset_paths(_cfg(data_root=str(tmp_path), ann_file='ann.txt'))
    assert str(info.value) == (
        'dataset files without data:\n  train_dataloader.dataset (CustomDataset): '
        f"'{tmp_path}/ann.txt' (data_root + ann_file) is empty (it lists nothing); expected "
        '<data_root>/<data_prefix>/<class>/<image> folders, or images listed in '
        '<data_root>/<ann_file> as "path label" lines')


def test_an_empty_image_folder_is_named(tmp_path):
    """An ADE20K-style folder without images made 0 samples: mmengine then failed with
    "`epoch_length` must be a positive integer, but got 0", naming no folder."""
    (tmp_path / 'images' / 'training').mkdir(parents=True)
    (tmp_path / 'annotations' / 'training').mkdir(parents=True)
    (tmp_path / 'annotations' / 'training' / 'a.png').write_bytes(b'x')
    cfg = dict(train_dataloader=dict(dataset=dict(
        type='ADE20KDataset', data_root=str(tmp_path),
        data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'))))
    with pytest.raises(ValueError) as info:
        check_dataset_paths(cfg)
    assert (f"train_dataloader.dataset (ADE20KDataset): the folder '{tmp_path}/images/training' "
            '(data_root + data_prefix.img_path) holds no file') in str(info.value)
    (tmp_path / 'images' / 'training' / 'sub').mkdir()
    (tmp_path / 'images' / 'training' / 'sub' / 'a.jpg').write_bytes(b'x')
    check_dataset_paths(cfg)  # a file in a sub-folder counts
