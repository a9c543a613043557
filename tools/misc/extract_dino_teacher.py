"""Extract the teacher backbone of a DINO checkpoint into a backbone-only mmengine checkpoint.

Input: an mmengine checkpoint of ``dinomamba_mm.DINO`` (``state_dict`` keys ``teacher.backbone.*``),
or a checkpoint of the DINO reference code / the Dino-Mamba paper (a ``'teacher'`` state dict;
paper key names are converted to DinoVim's). Output: ``{'state_dict': ..., 'meta': ...}`` with

- keys ``backbone.<name>`` (default): for ``model.backbone.checkpoint`` of the linear-probe
  configs, ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')`` on a
  backbone, or ``load_from`` of a model whose backbone is ``model.backbone``;
- keys ``<name>`` (``--plain``): for ``init_cfg=dict(type='Pretrained', checkpoint=...)`` on the
  backbone itself or ``backbone.load_state_dict``.

``meta`` records the source file, its epoch / iteration when known, and the teacher's token
layout and position-embedding grid (``meta['backbone_layouts']``) when the source records them
(the paper's files: 'paper'). A checkpoint without a teacher (a student, a classifier) is an
error unless ``--prefix`` names the weights to take; the output never replaces the input.

Usage::

    python tools/misc/extract_dino_teacher.py work_dirs/dino/epoch_100.pth dinovim-t_teacher.pth
"""
import argparse
from typing import Optional, Sequence

from mmengine.runner.checkpoint import save_checkpoint

from dinomamba_mm.checkpoints import (check_finite, check_output_path, find_backbone_weights,
                                      read_checkpoint)
from dinomamba_mm.engine.safeguards import AtomicLocalBackend  # noqa: F401 (atomic_local)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('checkpoint', help='DINO checkpoint (path or URL)')
    parser.add_argument('out', help='output file (.pth)')
    parser.add_argument('--plain', action='store_true',
                        help="write keys without the 'backbone.' prefix")
    parser.add_argument('--prefix', default=None,
                        help="key prefix of the backbone in the input's state_dict (default: "
                        "the teacher's, 'teacher.backbone.'; e.g. 'backbone.' for a student)")
    return parser.parse_args(argv)


def extract_teacher(checkpoint: dict, source: str, plain: bool = False,
                    prefix: Optional[str] = None) -> dict:
    """The backbone-only checkpoint (a dict) of a loaded DINO checkpoint."""
    name = f'checkpoint {source!r}'
    weights = find_backbone_weights(checkpoint, name, 'auto' if prefix is None else prefix,
                                    teacher_only=prefix is None)
    check_finite(weights.state_dict, name)
    meta = dict(source=source, extracted='teacher backbone' if prefix is None else prefix)
    old_meta = checkpoint.get('meta')
    if isinstance(old_meta, dict):
        meta.update({k: old_meta[k] for k in ('epoch', 'iter') if k in old_meta})
    elif 'epoch' in checkpoint:
        meta['epoch'] = checkpoint['epoch']
    return weights.as_checkpoint('' if plain else 'backbone.', **meta)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    check_output_path(args.out, args.checkpoint)
    loaded = read_checkpoint(args.checkpoint)
    out = extract_teacher(loaded, args.checkpoint, args.plain, args.prefix)
    save_checkpoint(out, args.out, backend_args=dict(backend='atomic_local'))
    num_params = sum(v.numel() for v in out['state_dict'].values())
    print(f'wrote {len(out["state_dict"])} tensors ({num_params / 1e6:.2f}M values) of the '
          f'teacher backbone to {args.out}')


if __name__ == '__main__':
    main()
