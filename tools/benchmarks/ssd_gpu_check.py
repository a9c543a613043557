"""One-shot GPU check: the Triton SSD scan against the PyTorch path and the float64 oracle, then
a few DINO and UperNet training iterations.

    python tools/benchmarks/ssd_gpu_check.py [--lengths 197 785 3137] [--batch 8]
        [--steps ssd dino upernet] [--device cpu --tiny]

1. Correctness (fp32 and bf16): the bidirectional Triton op against the chunked PyTorch path
   (``impl='torch'``) on the vision shapes B 8, L in ``--lengths``, H 24, P 64, N 64, outputs
   and the gradients of every input; both paths against the float64 sequential oracle on a
   small shape; under strong decay (|A| in [1, 16], dt' up to 8) the gradients of A, dt and
   dt_bias of both paths against the oracle. Errors are max |a - b| / max(1, max |b|) (strong
   decay: / max |b|, tolerance 1e-4; the Triton path multiplies fp32 in TF32 on the GPU: dA
   6e-2, dt and dt_bias 2e-3).
2. Training (batch 32 / 4): 4 iterations of the DinoVim-S DINO and UperNet configs, bf16 AMP,
   through tools/train.py's config handling and mmengine's Runner, on synthetic data; every loss
   finite, the DINO teacher moved by its EMA step. UperNet is SKIPped without mmcv's compiled
   ops. ``--device cpu --tiny`` rehearses this step on CPU (float32, 48 / 64 px, batch 2).

Timings against mamba_ssm are ``tools/benchmarks/ssd.py --device cuda``; the same checks on CPU
under Triton's interpreter are ``tests/test_ops/``. How to run this on the device machine:
docs/benchmarks.md, section GPU. Exits 0 with a message when no CUDA device is present (and no
``--device cpu``); exits 1 when a check fails.
"""
import argparse
import math
import os
import os.path as osp
import sys
import tempfile
import traceback
from typing import Callable, Dict, List, Tuple

import torch
from mmengine.config import Config
from mmengine.hooks import Hook

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path[:0] = [osp.join(ROOT, *d) for d in (('tools', 'benchmarks'), ('tools', 'data'),
                                               ('tools', ), ('tests', 'test_ops'))]
from benchmark_utils import machine_line  # noqa: E402
from make_synthetic import make_synthetic  # noqa: E402
from ssd_cases import strong_decay_inputs  # noqa: E402  (the tests' strong-decay inputs)

TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 6e-2}
NAMES = ('x', 'dt', 'A', 'B', 'C', 'D', 'z', 'dt_bias')


def make_inputs(batch: int, length: int, heads: int, headdim: int, dstate: int, groups: int,
                dtype: torch.dtype, seed: int) -> Dict[str, Tuple[torch.Tensor, torch.Tensor]]:
    """(forward, backward) inputs of a DinoVim mixer: separate values per direction."""
    g = torch.Generator(device='cuda').manual_seed(seed)
    dev = 'cuda'

    def one():
        return dict(
            x=torch.randn(batch, length, heads, headdim, device=dev, generator=g).to(dtype),
            dt=torch.randn(batch, length, heads, device=dev, generator=g) * 0.5,
            A=-torch.exp(torch.rand(heads, device=dev, generator=g) * 2.7),  # -[1, 16]
            B=(torch.randn(batch, length, groups, dstate, device=dev, generator=g) * 0.3).to(dtype),
            C=(torch.randn(batch, length, groups, dstate, device=dev, generator=g) * 0.3).to(dtype),
            D=torch.randn(heads, device=dev, generator=g),
            z=torch.randn(batch, length, heads, headdim, device=dev, generator=g).to(dtype),
            dt_bias=torch.randn(heads, device=dev, generator=g) * 0.5 - 4.0)

    fwd, bwd = one(), one()
    return {n: (fwd[n], bwd[n]) for n in NAMES}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1.0)).item()


def run_bidirectional(inputs, impl: str, chunk_size: int = 256):
    from dinomamba_mm.ops.ssd import ssd_scan_bidirectional
    leaves = {n: tuple(t.detach().clone().requires_grad_() for t in pair)
              for n, pair in inputs.items()}
    y_f, y_b = ssd_scan_bidirectional(*(leaves[n] for n in ('x', 'dt', 'A', 'B', 'C')),
                                      chunk_size=chunk_size, D=leaves['D'], z=leaves['z'],
                                      dt_bias=leaves['dt_bias'], dt_softplus=True, impl=impl)
    g = torch.Generator(device='cuda').manual_seed(0)
    cot = [torch.randn(y.shape, device='cuda', generator=g).to(y.dtype) for y in (y_f, y_b)]
    torch.autograd.backward([y_f, y_b], cot)
    grads = {f'd{n}[{k}]': leaves[n][k].grad for n in NAMES for k in range(2)}
    return {'y_fwd': y_f.detach(), 'y_bwd': y_b.detach(), **grads}


def run_oracle(inputs):
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    leaves = {n: tuple(t.detach().double().requires_grad_() for t in pair)
              for n, pair in inputs.items()}
    ys = [ssd_scan_naive(*(leaves[n][k] for n in ('x', 'dt', 'A', 'B', 'C')), D=leaves['D'][k],
                         z=leaves['z'][k], dt_bias=leaves['dt_bias'][k], dt_softplus=True,
                         reverse=bool(k)) for k in range(2)]
    g = torch.Generator(device='cuda').manual_seed(0)
    cot = [torch.randn(y.shape, device='cuda', generator=g).to(inputs['x'][0].dtype).double()
           for y in ys]
    torch.autograd.backward(ys, cot)
    grads = {f'd{n}[{k}]': leaves[n][k].grad for n in NAMES for k in range(2)}
    return {'y_fwd': ys[0].detach(), 'y_bwd': ys[1].detach(), **grads}


def compare(label: str, got: Callable[[], Dict[str, torch.Tensor]],
            ref: Callable[[], Dict[str, torch.Tensor]], tol: float) -> bool:
    """Runs both sides; an exception in either is reported as a failure, not raised."""
    try:
        got, ref = got(), ref()
    except Exception:  # a kernel that does not compile or launch here: report, go on
        print(f'  {label:58s} ERROR')
        traceback.print_exc(limit=-3, file=sys.stdout)
        return False
    errors = {k: rel_err(got[k], ref[k]) for k in ref}
    worst = max(errors, key=errors.get)
    ok = errors[worst] <= tol
    print(f'  {label:58s} worst {worst:9s} {errors[worst]:.2e} (tol {tol:.0e}) '
          f'{"PASS" if ok else "FAIL"}')
    if not ok:
        print('    ' + ', '.join(f'{k} {v:.1e}' for k, v in errors.items()))
    return ok


def decay_gradient_errors(inputs, impl: str, mode: str) -> Dict[str, float]:
    """max |d - d_ref| / max |d_ref| of the gradients of A, dt, dt_bias; mode 'forward',
    'reverse' or 'bidirectional'."""
    from dinomamba_mm.ops.ssd import ssd_scan, ssd_scan_bidirectional
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    ours = {k: v.float().requires_grad_() for k, v in inputs.items()}
    ref = {k: v.float().double().requires_grad_() for k, v in inputs.items()}
    if mode == 'bidirectional':
        outs = ssd_scan_bidirectional(**ours, chunk_size=256, dt_softplus=True, impl=impl)
        refs = [ssd_scan_naive(**ref, dt_softplus=True, reverse=r) for r in (False, True)]
    else:
        reverse = mode == 'reverse'
        outs = [ssd_scan(**ours, chunk_size=256, dt_softplus=True, reverse=reverse, impl=impl)]
        refs = [ssd_scan_naive(**ref, dt_softplus=True, reverse=reverse)]
    g = torch.Generator().manual_seed(0)
    cot = [torch.randn(r.shape, generator=g, dtype=torch.float64).to(r.device) for r in refs]
    torch.autograd.backward([o.double() for o in outs], cot)
    torch.autograd.backward(refs, cot)
    return {n: ((ours[n].grad.double() - ref[n].grad).abs().max()
                / ref[n].grad.abs().max()).item() for n in ('A', 'dt', 'dt_bias')}


def decay_tolerance(impl: str, name: str) -> float:
    """1e-4; the Triton kernels on a GPU multiply fp32 in TF32, which takes dA to ~3e-2 and dt,
    dt_bias to ~4e-4 (test_decay_gradients_with_tf32_products in tests/test_ops/test_ssd_triton.py
    measures it on CPU)."""
    if impl == 'triton':
        return 6e-2 if name == 'A' else 2e-3
    return 1e-4


def check_strong_decay() -> bool:
    ok = True
    print('strong decay, fp32 gradients vs float64 oracle (max |err| / max |ref|, tol 1e-4; '
          'Triton on GPU, TF32 products: dA 6e-2, dt and dt_bias 2e-3):')
    for dt_scale in (2, 8):
        inputs = {k: v.cuda() for k, v in strong_decay_inputs(dt_scale, seed=dt_scale).items()}
        for impl in ('triton', 'torch'):
            for mode in ('forward', 'reverse', 'bidirectional'):
                try:
                    errors = decay_gradient_errors(inputs, impl, mode)
                except Exception:
                    print(f'  {impl:6s} dt\' ~ {dt_scale} {mode:13s} ERROR')
                    traceback.print_exc(limit=-3, file=sys.stdout)
                    ok = False
                    continue
                passed = all(e <= decay_tolerance(impl, n) for n, e in errors.items())
                ok &= passed
                print(f'  {impl:6s} dt\' ~ {dt_scale} {mode:13s} ' + ', '.join(
                    f'd{n} {e:.1e}' for n, e in errors.items()) + (' PASS' if passed else ' FAIL'))
    return ok


def check_correctness(lengths: List[int], batch: int) -> bool:
    ok = True
    print('correctness (relative max error):')
    for dtype in (torch.float32, torch.bfloat16):
        small = make_inputs(1, 197, 4, 64, 64, 1, dtype, seed=1)
        oracle = run_oracle(small)
        for impl in ('triton', 'torch'):
            ok &= compare(f'{impl} vs float64 oracle, B1 L197 H4 {dtype}',
                          lambda: run_bidirectional(small, impl), lambda: oracle,
                          TOLERANCE[dtype])
        for length in lengths:
            inputs = make_inputs(batch, length, 24, 64, 64, 1, dtype, seed=length)
            ok &= compare(f'triton vs torch path, B{batch} L{length} H24 P64 N64 {dtype}',
                          lambda: run_bidirectional(inputs, 'triton'),
                          lambda: run_bidirectional(inputs, 'torch'), TOLERANCE[dtype])
            torch.cuda.empty_cache()
    return ok


TRAIN_STEPS = {  # step: (config, synthetic layout)
    'dino': ('configs/dino/dino_dinovim-small-p16_8xb64-amp-coslr-100e_in1k.py', 'cls'),
    'upernet': ('configs/ade20k/upernet_dinovim-small-p16_paper-teacher_8xb2-amp-160k_'
                'ade20k-512x512.py', 'ade'),
}


def train_options(step: str, data_root: str, batch: int, iters: int, tiny: bool) -> List[str]:
    """tools/train.py's ``--cfg-options`` for a short run on synthetic data, nothing saved or
    loaded; DINO at a constant lr 5e-4 (the recipe warms up from 1e-9, under which the teacher's
    EMA step is below float32 resolution), for one epoch of ``batch * iters`` images."""
    loader = 'train_dataloader.dataset.'
    common = [f'{loader}data_root={data_root}', f'train_dataloader.batch_size={batch}',
              f'train_dataloader.num_workers={0 if tiny else 8}', 'log_level=WARNING',
              'default_hooks.checkpoint=None']
    if step == 'dino':
        return common + ['train_cfg.max_epochs=1', 'param_scheduler=[]',
                         'auto_scale_lr.enable=False'] + [
            f'{loader}pipeline.1.{k}' for k in ('global_crop_size=48', 'local_crop_size=32',
                                                'num_local_crops=2') if tiny]
    return common + [f'train_cfg.max_iters={iters}', 'model.backbone.init_cfg=None'] + [
        f'{loader}pipeline.2.scale="(256,64)"', f'{loader}pipeline.3.crop_size="(64,64)"',
        'model.data_preprocessor.size="(64,64)"', 'model.backbone.img_size=64'] * tiny


class TrainProbe(Hook):
    """Checks each iteration's losses are finite and, for DINO, that the teacher moved, by
    ``m * teacher_before + (1 - m) * student`` (``m`` the momentum recorded by the EMA step)."""
    priority = 'LOWEST'  # after DINOTeacherEMAHook

    ok = True

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        model = getattr(runner.model, 'module', runner.model)
        self.before = [p.detach().clone() for p in model.teacher.parameters()] if hasattr(
            model, 'teacher') else None

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        losses = {k: float(torch.as_tensor(v).detach()) for k, v in outputs.items() if 'loss' in k}
        ok = bool(losses) and all(map(math.isfinite, losses.values()))
        row = f'iter {runner.iter + 1}: ' + ', '.join(f'{k} {v:.4f}' for k, v in losses.items())
        if self.before is not None:
            model = getattr(runner.model, 'module', runner.model)
            m, teacher = float(model.momentum), list(model.teacher.parameters())
            student = [*model.backbone.parameters(), *model.neck.parameters()]  # teacher's order
            moved = max((t - b).abs().max().item()
                        for t, b in zip(teacher, self.before, strict=True))
            # float32 rounding: 4 ulps of the weights, 1e-3 of the step (m is stored in fp32)
            off = max(((t.double() - m * b.double() - (1 - m) * s.double()).abs().max() / (
                4 * torch.finfo(t.dtype).eps * b.abs().max() + 1e-3 * (t - b).abs().max())).item()
                for t, b, s in zip(teacher, self.before, student, strict=True))
            ok &= 0 < moved and off <= 1
            row += f'; teacher moved {moved:.1e}, off the EMA (m {m:.6f}) by {off:.2f} x tol'
        self.ok &= ok
        print(f'  {row} {"PASS" if ok else "FAIL"}', flush=True)


def check_training(step: str, tiny: bool, iters: int, batch: int, work_dir: str) -> str:
    """A few iterations of ``TRAIN_STEPS[step]`` through tools/train.py's config handling and
    mmengine's Runner on data made by tools/data/make_synthetic.py; 'PASS' / 'FAIL' / 'SKIP'."""
    if step == 'upernet':
        try:
            import mmcv.ops  # noqa: F401  (mmseg imports it: UperNet cannot run without it)
        except ImportError as exc:
            print(f'upernet: SKIP, mmseg needs mmcv\'s compiled ops (mmcv.ops: {exc})')
            return 'SKIP'
    from mmengine.runner import Runner
    from train import merge_args, parse_args  # imports dinomamba_mm: after TRITON_INTERPRET
    config, layout = TRAIN_STEPS[step]
    data = osp.join(work_dir, 'data')
    make_synthetic(data, num_train=batch * iters, num_val=1, size=64 if tiny else 224,
                   seg_size=64 if tiny else 256, layouts=(layout, ))
    argv = [osp.join(ROOT, config), '--work-dir', osp.join(work_dir, step), '--no-validate',
            *(['--no-persistent-workers'] if tiny else []),
            '--cfg-options', *train_options(step, osp.join(data, layout), batch, iters, tiny)]
    print(f'{step}: python tools/train.py ' + ' '.join(argv).replace(ROOT + '/', ''))
    try:
        cfg = merge_args(Config.fromfile(argv[0]), parse_args(argv))
        runner = Runner.from_cfg(cfg)
        probe = TrainProbe()
        runner.register_hook(probe)
        runner.train()
    except Exception:
        traceback.print_exc(limit=-4, file=sys.stdout)
        return 'FAIL'
    return 'PASS' if probe.ok and runner.iter == iters else 'FAIL'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', nargs='+', default=['ssd', *TRAIN_STEPS],
                        choices=['ssd', *TRAIN_STEPS], help='what to check (default: all)')
    parser.add_argument('--device', choices=['cuda', 'cpu'], default='cuda',
                        help='cpu: a rehearsal of the training steps (fp32, the ssd step skipped)')
    parser.add_argument('--tiny', action='store_true',
                        help='training steps at 48 / 64 px, batch 2, 2 iterations')
    parser.add_argument('--lengths', type=int, nargs='+', default=[197, 785, 3137],
                        help='sequence lengths checked (default: 197 785 3137)')
    parser.add_argument('--batch', type=int, default=8, help='batch size (default 8)')
    args = parser.parse_args()
    if args.device == 'cpu':
        os.environ['CUDA_VISIBLE_DEVICES'] = ''  # before CUDA is first queried
    elif not torch.cuda.is_available():
        print('ssd_gpu_check: no CUDA device here; this check needs a GPU (written for an H200) '
              'or --device cpu. Nothing was run.')
        return 0
    else:
        import triton
        print(machine_line('cuda'), f'| triton {triton.__version__} | sm_%d%d'
              % torch.cuda.get_device_capability())
    results = {}
    if 'ssd' in args.steps:
        if args.device == 'cpu':
            results['ssd'] = 'SKIP'
            print('ssd: SKIP on --device cpu (tests/test_ops/ check the kernels on CPU)')
        else:
            ok = check_correctness(args.lengths, args.batch) & check_strong_decay()
            results['ssd'] = 'PASS' if ok else 'FAIL'
    iters = 2 if args.tiny else 4
    with tempfile.TemporaryDirectory() as tmp:
        for step in (s for s in TRAIN_STEPS if s in args.steps):
            batch = 2 if args.tiny else {'dino': 32, 'upernet': 4}[step]
            results[step] = check_training(step, args.tiny, iters, batch, tmp)
    print('summary: ' + ', '.join(f'{k} {v}' for k, v in results.items()))
    return 1 if 'FAIL' in results.values() else 0


if __name__ == '__main__':
    sys.exit(main())
