"""Check, before anything is built, that a config's datasets point at existing files.

The stock dataset classes fail late (after the model is built, inside a dataloader worker) and name
only one path. ``tools/train.py`` and ``tools/test.py`` call :func:`check_dataset_paths` first so a
wrong ``data_root`` or layout is reported with every missing path and the layout the dataset class
reads.
"""
import os.path as osp
from typing import List, Mapping

EXPECTED_LAYOUTS = {
    'ImageNet': ('<data_root>/train/<wnid>/*.JPEG, <data_root>/val/..., and '
                 '<data_root>/meta/{train,val}.txt ("path label" lines) when ann_file is set'),
    'CustomDataset': ('<data_root>/<data_prefix>/<class>/<image> folders, or images listed '
                      'in <data_root>/<ann_file> as "path label" lines'),
    'ADE20KDataset': ('<data_root>/images/{training,validation}/*.jpg and '
                      '<data_root>/annotations/{training,validation}/*.png'),
    'BaseSegDataset': ('<data_root>/<data_prefix.img_path>/* images and '
                       '<data_root>/<data_prefix.seg_map_path>/*.png label maps'),
    'CocoDataset': ('<data_root>/{train2017,val2017}/*.jpg and '
                    '<data_root>/annotations/instances_{train,val}2017.json'),
}
_WRAPPERS = ('dataset', 'datasets')


def _dataset_paths(cfg: Mapping) -> List[str]:
    root = cfg.get('data_root') or ''
    paths = [root] if root else []
    ann_file = cfg.get('ann_file') or ''
    if ann_file:
        paths.append(osp.join(root, ann_file))
    prefix = cfg.get('data_prefix') or {}
    prefixes = prefix.values() if isinstance(prefix, Mapping) else [prefix]
    paths += [osp.join(root, p) for p in prefixes if isinstance(p, str) and p]
    return paths


def _leaf_datasets(cfg: Mapping) -> List[Mapping]:
    """Datasets inside wrappers (RepeatDataset, ConcatDataset, ...)."""
    for key in _WRAPPERS:
        inner = cfg.get(key)
        if isinstance(inner, Mapping):
            return _leaf_datasets(inner)
        if isinstance(inner, (list, tuple)):
            return [leaf for item in inner for leaf in _leaf_datasets(item)]
    return [cfg]


def check_dataset_paths(cfg: Mapping, loaders=('train_dataloader', 'val_dataloader',
                                               'test_dataloader')) -> None:
    """Raise FileNotFoundError naming every missing dataset path of ``cfg``'s dataloaders.

    Args:
        cfg: a whole config (dict-like); dataloaders that are None or absent are skipped.
        loaders: which dataloader fields to check.
    """
    problems = []
    for loader in loaders:
        loader_cfg = cfg.get(loader)
        if not isinstance(loader_cfg, Mapping) or not isinstance(
                loader_cfg.get('dataset'), Mapping):
            continue
        for dataset in _leaf_datasets(loader_cfg['dataset']):
            missing = [p for p in _dataset_paths(dataset) if not osp.exists(p)]
            if not missing:
                continue
            kind = str(dataset.get('type', '?')).split('.')[-1]
            layout = EXPECTED_LAYOUTS.get(kind, 'the layout its dataset class documents')
            problems.append(f'{loader}.dataset ({kind}): missing {missing}; expected {layout}')
    if problems:
        hint = ''
        if any('synthetic' in p for p in problems):
            hint = ('\nThe synthetic dataset is made by: python tools/data/make_synthetic.py '
                    '--out data/synthetic --seed 0')
        raise FileNotFoundError('dataset paths not found:\n  ' + '\n  '.join(problems) + hint)
