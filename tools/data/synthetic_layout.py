"""The on-disk layouts of the synthetic shapes dataset, and a check that a root follows one.

Each layout is the one a stock OpenMMLab dataset class reads unchanged:

- ``cls``  (mmpretrain ``ImageNet`` / ``CustomDataset`` with ``ann_file``)::

      cls/train/<class>/<name>.JPEG   cls/val/<class>/<name>.JPEG
      cls/meta/train.txt              cls/meta/val.txt   ("<class>/<name>.JPEG <label>" lines)

- ``ade``  (mmseg ``ADE20KDataset`` with the shape classes as metainfo)::

      ade/images/training/*.jpg       ade/annotations/training/*.png
      ade/images/validation/*.jpg     ade/annotations/validation/*.png
  label maps: 0 = background, k = k-th class (1-based); ``reduce_zero_label=True`` maps
  background to 255 (ignored) and classes to 0..K-1, exactly as for ADE20K.

- ``coco`` (mmdet ``CocoDataset`` with the shape classes as metainfo)::

      coco/train2017/*.jpg            coco/val2017/*.jpg
      coco/annotations/instances_train2017.json
      coco/annotations/instances_val2017.json

Usage: ``python tools/data/synthetic_layout.py data/synthetic/ade --kind ade``.
"""
import argparse
import os.path as osp
from typing import Dict, List

LAYOUT_KINDS = ('cls', 'ade', 'coco')

_REQUIRED: Dict[str, List[str]] = {
    'cls': ['train', 'val', 'meta/train.txt', 'meta/val.txt'],
    'ade': ['images/training', 'images/validation', 'annotations/training',
            'annotations/validation'],
    'coco': ['train2017', 'val2017', 'annotations/instances_train2017.json',
             'annotations/instances_val2017.json'],
}


def describe_layout(kind: str) -> str:
    """Return the required entries of layout ``kind`` as an indented listing."""
    if kind not in LAYOUT_KINDS:
        raise ValueError(f'kind must be one of {LAYOUT_KINDS}, got {kind!r}')
    return '\n'.join(f'    <root>/{entry}' for entry in _REQUIRED[kind])


def check_layout(root: str, kind: str) -> None:
    """Raise ``FileNotFoundError`` unless ``root`` holds every entry of layout ``kind``.

    Args:
        root: the layout's root, e.g. ``data/synthetic/ade``.
        kind: one of ``'cls'``, ``'ade'``, ``'coco'``.

    Raises:
        ValueError: ``kind`` is unknown.
        FileNotFoundError: ``root`` or one of its required entries is missing; the message
            names the missing paths and the expected layout.
    """
    expected = describe_layout(kind)
    if not osp.isdir(root):
        raise FileNotFoundError(
            f'{kind} dataset root {root!r} is not a directory; expected a folder with:\n'
            f'{expected}\n(create it with: python tools/data/make_synthetic.py '
            f'--out <dir>, then use <dir>/{kind})')
    missing = [osp.join(root, entry) for entry in _REQUIRED[kind]
               if not osp.exists(osp.join(root, entry))]
    if missing:
        raise FileNotFoundError(
            f'{kind} dataset root {root!r} lacks {missing}; expected a folder with:\n'
            f'{expected}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('root', help='layout root, e.g. data/synthetic/ade')
    parser.add_argument('--kind', required=True, choices=LAYOUT_KINDS,
                        help='the layout ROOT should have')
    args = parser.parse_args()
    check_layout(args.root, args.kind)
    print(f'{args.root}: {args.kind} layout OK')


if __name__ == '__main__':
    main()
