"""Peak CPU memory of UperNet on DinoVim-T vs ViT-T, inference at high resolution or a training
step at the crop size, side by side.

Each model runs in a fresh process built from the ADE20K configs (configs/ade20k/upernet_*.py:
DinoVim-T as configured; ViT-T = the ViT-B config with mmpretrain's 'deit-tiny' arch, 192 wide,
12 blocks, 3 heads), random weights, BN, eval mode, one image of SIZE x SIZE given to the
whole network at once (``mode='whole'``: the backbone sees all (SIZE/16)^2 tokens; the configs'
slide inference would cut it into 512 crops); DinoVim-T also with ``segment_len=None`` (each
mixer runs the whole sequence at once instead of its no-grad segments). The figure
is the rise of the resident set's high-water mark (VmHWM, reset through /proc/self/clear_refs
after the model is built) during the forward pass, for the backbone alone and for the whole
segmentor (backbone, Feature2Pyramid, UPerHead + FCN head, resize of the logits to the image).
``--train``: one training step instead (train mode, ``loss`` on a batch of two SIZE x SIZE
images with random labels, backward; the segments play no part with autograd), also for the
CPU demo's UperNet (configs/demo/upernet_dinovim-demo_synthetic-ade.py).

    python tools/benchmarks/dense_memory.py [--size 1024] [--threads 2]
    python tools/benchmarks/dense_memory.py --train --size 512
"""
import argparse
import json
import os.path as osp
import subprocess
import sys

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_utils import (PeakMemory, Timer, machine_line, table_header,  # noqa: E402
                             table_row)

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = {
    'dinovim-t': 'configs/ade20k/upernet_dinovim-tiny-p16_paper-teacher_8xb2-amp-160k_'
                 'ade20k-512x512.py',
    'vit-t': 'configs/ade20k/upernet_vit-base-p16_dino-ours_8xb2-amp-160k_ade20k-512x512.py',
}
# DinoVim-T again with its mixers' no-grad segments turned off: what segmenting saves
CONFIGS['dinovim-t-whole'] = CONFIGS['dinovim-t']
# with the CPU demo's UperNet (4 blocks, width 64; --train only)
ALL_CONFIGS = {**CONFIGS, 'dinovim-demo': 'configs/demo/upernet_dinovim-demo_synthetic-ade.py'}
VIT_T_WIDTH = 192


def build_segmentor(name: str, size: int):
    """The ADE20K UperNet of ``name`` with random weights, BN and whole-image inference."""
    import torch
    from mmengine import Config
    from mmengine.registry import init_default_scope
    cfg = Config.fromfile(osp.join(REPO, ALL_CONFIGS[name]))
    model_cfg = cfg.model
    model_cfg.backbone.init_cfg = None
    model_cfg.backbone.img_size = (size, size)
    if name == 'dinovim-t-whole':
        model_cfg.backbone.mixer_cfg = dict(segment_len=None)
    if name == 'vit-t':
        model_cfg.backbone.arch = 'deit-tiny'
        model_cfg.neck.embed_dim = VIT_T_WIDTH
        model_cfg.decode_head.in_channels = [VIT_T_WIDTH] * 4
        model_cfg.auxiliary_head.in_channels = VIT_T_WIDTH
    for part in (model_cfg.neck, model_cfg.decode_head, model_cfg.auxiliary_head):
        part.norm_cfg = dict(type='BN', requires_grad=True)
    model_cfg.test_cfg = dict(mode='whole')
    init_default_scope('mmseg')
    from mmseg.registry import MODELS
    model = MODELS.build(model_cfg).eval()
    torch.manual_seed(0)
    return model


def train_step(model, size: int) -> None:
    """loss + backward of the segmentor on two random images with random labels."""
    import torch
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    images = torch.randn(2, 3, size, size)
    samples = []
    for _ in range(2):
        sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                             pad_shape=(size, size)))
        sample.gt_sem_seg = PixelData(
            data=torch.randint(0, model.decode_head.num_classes, (1, size, size)))
        samples.append(sample)
    model.train()
    losses = model.loss(images, samples)
    sum(v for k, v in losses.items() if 'loss' in k).backward()


def worker(name: str, size: int, part: str, threads: int) -> dict:
    import torch
    torch.set_num_threads(threads)
    model = build_segmentor(name, size)
    image = torch.randn(1, 3, size, size)
    meta = [dict(img_shape=(size, size), ori_shape=(size, size), pad_shape=(size, size))]
    if part == 'train':
        with PeakMemory() as memory, Timer() as timer:
            train_step(model, size)
    else:
        run = (lambda: model.backbone(image)) if part == 'backbone' else \
            (lambda: model.encode_decode(image, meta))
        with PeakMemory() as memory, Timer() as timer, torch.no_grad():
            run()
    params = sum(p.numel() for p in model.backbone.parameters())
    return dict(name=name, part=part, peak_rise_mib=memory.mib, seconds=timer.wall,
                backbone_params_m=params / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, default=1024,
                        help='image side, a multiple of 16 (default 1024)')
    parser.add_argument('--threads', type=int, default=2,
                        help='torch threads of each measuring process (default 2)')
    parser.add_argument('--train', action='store_true',
                        help='one training step (batch 2) instead of inference')
    parser.add_argument('--worker', choices=sorted(ALL_CONFIGS),
                        help=argparse.SUPPRESS)
    parser.add_argument('--part', choices=('backbone', 'segmentor', 'train'),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.size % 16:
        raise ValueError(f'--size must be a multiple of 16, got {args.size}')
    if args.worker:
        print(json.dumps(worker(args.worker, args.size, args.part, args.threads)))
        return

    print(f'machine: {machine_line()}; measuring processes: {args.threads} threads')
    parts, names = ('backbone', 'segmentor'), list(CONFIGS)
    if args.train:
        parts, names = ('train', ), ['dinovim-t', 'dinovim-demo', 'vit-t']
        print(f'UperNet training step on two {args.size}x{args.size} images, fresh process per '
              'run')
    else:
        print(f'UperNet inference on one {args.size}x{args.size} image '
              f'({(args.size // 16)**2} tokens), mode whole, fresh process per run')
    results = {}
    for part in parts:
        for name in names:
            out = subprocess.run(
                [sys.executable, __file__, '--worker', name, '--part', part, '--size',
                 str(args.size), '--threads', str(args.threads)],
                capture_output=True, text=True, check=True, cwd=REPO)
            results[name, part] = json.loads(out.stdout.strip().splitlines()[-1])
    print(table_header(['part', 'model', 'params (M)', 'peak rise (MiB)', 'time (s)']))
    for (name, part), r in results.items():
        print(table_row([part, name, f'{r["backbone_params_m"]:.1f}',
                         f'{r["peak_rise_mib"]:.0f}', f'{r["seconds"]:.2f}']))
    for part in parts:
        for name in (n for n in names if n.startswith('dinovim-t')):
            ratio = (results[name, part]['peak_rise_mib']
                     / results['vit-t', part]['peak_rise_mib'])
            print(f'{part}: {name} / vit-t peak memory = {ratio:.2f}')


if __name__ == '__main__':
    main()
