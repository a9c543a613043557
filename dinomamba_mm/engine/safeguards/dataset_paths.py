"""Check, before anything is built, that a config's datasets point at existing files that hold
data (an annotation file that lists something, an image folder with a file in it).

The stock dataset classes fail late (after the model is built, inside a dataloader worker, or with
an epoch of 0 iterations) and name one path or none. ``tools/train.py`` and ``tools/test.py`` call
:func:`check_dataset_paths` first so a wrong ``data_root`` or layout is reported with every missing
or empty path, the config fields it is made of and the layout the dataset class reads.
"""
import os
import os.path as osp
from typing import List, Mapping, Tuple

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


def _dataset_paths(cfg: Mapping) -> List[Tuple[str, str, str]]:
    """(path, the config fields it is made of, 'root' / 'ann_file' / 'folder') of a dataset."""
    root = cfg.get('data_root') or ''
    paths = [(root, 'data_root', 'root')] if root else []
    ann_file = cfg.get('ann_file') or ''
    if ann_file:
        paths.append((osp.join(root, ann_file), 'data_root + ann_file' if root else 'ann_file',
                      'ann_file'))
    prefix = cfg.get('data_prefix') or {}
    prefixes = prefix.items() if isinstance(prefix, Mapping) else [(None, prefix)]
    for key, value in prefixes:
        if isinstance(value, str) and value:
            field = 'data_prefix' + (f'.{key}' if key else '')
            paths.append((osp.join(root, value), f'data_root + {field}' if root else field,
                          'folder'))
    if not ann_file and not any(kind == 'folder' for _, _, kind in paths) and root:
        paths[0] = (root, 'data_root', 'folder')  # the images are found under data_root
    return paths


def _holds_a_file(folder: str) -> bool:
    return any(files for _, _, files in os.walk(folder))


def _emptiness(path: str, kind: str) -> str:
    """Why an existing dataset path holds no data, or ''."""
    if kind == 'ann_file' and osp.isfile(path):
        with open(path, 'rb') as f:
            if not f.read(1 << 16).strip():
                return 'is empty (it lists nothing)'
    if kind == 'folder' and osp.isdir(path) and not _holds_a_file(path):
        return 'holds no file'
    return ''


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
    """Raise naming every missing or empty dataset path of ``cfg``'s dataloaders, each with the
    config fields it is made of (``data_root + ann_file``, ...) and the layout expected.

    Args:
        cfg: a whole config (dict-like); dataloaders that are None or absent are skipped.
        loaders: which dataloader fields to check.

    Raises:
        FileNotFoundError: some paths do not exist.
        ValueError: an annotation file is empty or an image folder holds no file (the stock
            datasets failed with "need at least one array to concatenate", or with 0 samples
            far later, naming no path).
    """
    missing, empty = [], []
    for loader in loaders:
        loader_cfg = cfg.get(loader)
        if not isinstance(loader_cfg, Mapping) or not isinstance(
                loader_cfg.get('dataset'), Mapping):
            continue
        for dataset in _leaf_datasets(loader_cfg['dataset']):
            kind = str(dataset.get('type', '?')).split('.')[-1]
            layout = EXPECTED_LAYOUTS.get(kind, 'the layout its dataset class documents')
            where = f'{loader}.dataset ({kind})'
            paths = _dataset_paths(dataset)
            absent = [f'{path!r} ({fields})' for path, fields, _ in paths
                      if not osp.exists(path)]
            if absent:
                missing.append(f'{where}: missing [{", ".join(absent)}]; expected {layout}')
                continue
            for path, fields, what in paths:
                problem = _emptiness(path, what)
                if problem:
                    name = repr(path) if what == 'ann_file' else f'the folder {path!r}'
                    empty.append(f'{where}: {name} ({fields}) {problem}; expected {layout}')
    if missing:
        hint = ''
        if any('synthetic' in p for p in missing):
            hint = ('\nThe synthetic dataset is made by: python tools/data/make_synthetic.py '
                    '--out data/synthetic --seed 0')
        raise FileNotFoundError('dataset paths not found:\n  ' + '\n  '.join(missing) + hint)
    if empty:
        raise ValueError('dataset files without data:\n  ' + '\n  '.join(empty))
