"""Parameters and FLOPs of a config's model (or backbone) at a given input size.

    python tools/misc/get_flops.py CONFIG [--shape 224 [224]] [--part backbone|model]

FLOPs follow mmpretrain's convention (that of its metafiles, which ``mim search`` compares ours
with): one multiply-add counts as one FLOP. They are counted by torch.utils.flop_counter on what
actually runs (matrix products and convolutions; its count of 2 per multiply-add is halved), so the
SSD scan is counted as the chunked algorithm executes it; element-wise work is not counted, as in
fvcore / mmengine's counters. (mmengine's
``get_model_complexity_info`` traces with torch.jit, where the SSD scan and the depthwise
convolution are opaque autograd Functions it counts as 0.)
"""
import argparse
from typing import Sequence

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import MODELS, init_default_scope
from torch.utils.flop_counter import FlopCounterMode

from dinomamba_mm.argument_checks import check_int


def count(model: torch.nn.Module, shape: Sequence[int]) -> dict:
    """Return {'params': int, 'flops': int (multiply-adds)} for one (1, 3, H, W) input."""
    model.eval()
    inputs = torch.zeros(1, 3, *shape)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(inputs)
    return dict(params=sum(p.numel() for p in model.parameters()),
                flops=counter.get_total_flops() // 2)


def without_weight_files(cfg):
    """``cfg`` with every FrozenBackbone's checkpoint dropped: counts do not depend on the
    weights, and a frozen backbone refuses to run before its checkpoint is loaded."""
    if isinstance(cfg, (list, tuple)):
        return type(cfg)(without_weight_files(item) for item in cfg)
    if not isinstance(cfg, dict):
        return cfg
    cfg = {key: without_weight_files(value) for key, value in cfg.items()}
    if str(cfg.get('type', '')).endswith('FrozenBackbone'):
        cfg['checkpoint'] = None
    return cfg


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description='Count parameters and FLOPs')
    parser.add_argument('config', help='config whose model (or backbone) is counted')
    parser.add_argument('--shape', type=int, nargs='+', default=[224],
                        help='input H [W] (default 224)')
    parser.add_argument('--part', choices=['backbone', 'model'], default='backbone',
                        help="'model' runs the whole model's tensor forward")
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the config, key=value')
    args = parser.parse_args(argv)
    if len(args.shape) not in (1, 2):
        parser.error(f'--shape takes H or H W, got {args.shape}')
    for side in args.shape:
        try:
            check_int('--shape', side, 1)
        except ValueError as error:
            parser.error(str(error))
    shape = args.shape * 2 if len(args.shape) == 1 else args.shape

    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    model_cfg = cfg.model
    if args.part == 'backbone':
        # A DINO model wraps its backbone; a FrozenBackbone wraps it once more.
        model_cfg = model_cfg.backbone
        while 'backbone' in model_cfg and 'type' in model_cfg.get('backbone', {}):
            model_cfg = model_cfg.backbone
    model_cfg = without_weight_files(model_cfg)
    model_cfg.pop('init_cfg', None)
    model = MODELS.build(model_cfg)
    if args.part == 'model':
        forward = model.forward
        model.forward = lambda x: forward(x, mode='tensor')
    result = count(model, shape)
    print(f'config: {args.config}\ninput: 1x3x{shape[0]}x{shape[1]} ({args.part})\n'
          f'params: {result["params"] / 1e6:.2f} M\n'
          f'FLOPs: {result["flops"] / 1e9:.2f} G (multiply-adds)')
    return result


if __name__ == '__main__':
    main()
