"""Convert a Dino-Mamba paper checkpoint (DINO checkpoint.pth) to an mmengine checkpoint.

    python tools/model_converters/dinomamba_to_mmpretrain.py \
        Vim/Base/checkpoint.pth work_dirs/dinovim_b_teacher.pth --source teacher

The output is ``{'state_dict': {prefix + key: tensor}, 'meta': {...}}`` with our DinoVim /
DinoMambaReg keys (mapping: dinomamba_mm/checkpoints/paper_format.py). ``meta`` records the source
file, teacher / student, the inferred ``arch`` dict, ``num_registers`` and, in
``meta['backbone_layouts']`` (dinomamba_mm/checkpoints/layout.py), the token layout ('paper') and
position-embedding grid that reproduce the paper's features; loading the result into another
token layout is an error. Unless ``--no-verify``, the result is loaded strictly into a backbone
built from the inferred arch first. The output never replaces the input; checkpoints this package
writes are extracted with tools/misc/extract_dino_teacher.py instead.
Load it with ``init_cfg=dict(type='dinomamba_mm.PaperCheckpoint', checkpoint=OUT)`` (strict) or
mmengine's ``dict(type='Pretrained', checkpoint=OUT, prefix='backbone.')`` (non-strict).
"""
import argparse
import time

from mmengine.runner.checkpoint import save_checkpoint

from dinomamba_mm.checkpoints import (CheckpointError, check_finite, check_output_path,
                                      find_backbone_weights, infer_arch, load_checkpoint_into,
                                      read_checkpoint)
from dinomamba_mm.engine.safeguards import AtomicLocalBackend  # noqa: F401 (atomic_local)
from dinomamba_mm.models.backbones import DinoVim


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='paper checkpoint.pth (path or URL)')
    parser.add_argument('dst', help='output mmengine checkpoint')
    parser.add_argument('--source', choices=('teacher', 'student'), default='teacher',
                        help='which DINO network to convert (default: teacher)')
    parser.add_argument('--prefix', default='backbone.',
                        help="prefix of the output keys (default 'backbone.'; '' for none)")
    parser.add_argument('--no-verify', action='store_true',
                        help='skip the strict load into a DinoVim built from the inferred arch')
    return parser.parse_args(argv)


def convert(src: str, source: str = 'teacher', prefix: str = 'backbone.',
            verify: bool = True) -> dict:
    """Load ``src`` and return the mmengine checkpoint dict (see the module docstring)."""
    loaded = read_checkpoint(src)
    weights = find_backbone_weights(loaded, f'checkpoint {src!r}', prefix=None, network=source)
    layout = weights.layouts.get(weights.module_path)
    if layout is None or isinstance(loaded.get('meta'), dict):
        raise CheckpointError(
            f'checkpoint {src!r} is not one of the paper\'s files (expected \'teacher\' / '
            f'\'student\' state dicts or the paper\'s key names; found the top-level keys '
            f'{sorted(map(str, loaded))[:8]}). For a checkpoint this package wrote (a DINO run, '
            'an extracted teacher), use tools/misc/extract_dino_teacher.py')
    check_finite(weights.state_dict, f'checkpoint {src!r}')
    info = infer_arch(weights.state_dict)
    if verify:
        img_size = [side * info['patch_size'] for side in layout['pos_embed_grid']]
        model = DinoVim(arch=info['arch'], img_size=img_size, patch_size=info['patch_size'],
                        num_registers=info['num_registers'],
                        token_layout=layout['token_layout'])
        load_checkpoint_into(model, loaded, network=source, filename=src)
    return weights.as_checkpoint(prefix, source_checkpoint=src, network=source,
                                 converted_at=time.strftime('%Y-%m-%d %H:%M:%S'), **info)


def main(argv=None) -> None:
    args = parse_args(argv)
    check_output_path(args.dst, args.src)
    checkpoint = convert(args.src, args.source, args.prefix, verify=not args.no_verify)
    save_checkpoint(checkpoint, args.dst, backend_args=dict(backend='atomic_local'))
    meta = checkpoint['meta']
    print(f'{args.src} ({args.source}) -> {args.dst}: {len(checkpoint["state_dict"])} tensors, '
          f'arch {meta["arch"]}, num_registers {meta["num_registers"]}')


if __name__ == '__main__':
    main()
