"""Float32 in place of AMP on a machine without an accelerator (tools/train.py, tools/test.py)."""
import logging

from mmengine.config import Config
from mmengine.device import get_device
from mmengine.logging import print_log

AMP_ONLY_KEYS = ('dtype', 'loss_scale', 'use_fsdp')


def fall_back_to_fp32_without_accelerator(cfg: Config) -> None:
    """Replace AMP by float32 in ``cfg``, with a warning, when mmengine finds no accelerator.

    mmengine's ``AmpOptimWrapper`` asserts a CUDA / NPU / MLU / MUSA device, so the bf16 AMP
    recipes of our configs would not build on a CPU-only machine. Here the optimizer wrapper
    becomes an ``OptimWrapper`` with the same optimizer, ``paramwise_cfg`` and ``clip_grad``
    (the AMP-only keys dropped), and ``test_cfg.fp16`` is turned off. On other machines
    ``cfg`` is left as it is.

    Args:
        cfg (Config): the config, changed in place.
    """
    if get_device() != 'cpu':
        return
    optim_wrapper = cfg.get('optim_wrapper')
    if optim_wrapper and str(optim_wrapper.get('type', '')).split('.')[-1] == 'AmpOptimWrapper':
        optim_wrapper.type = 'OptimWrapper'
        for key in AMP_ONLY_KEYS:
            optim_wrapper.pop(key, None)
        _warn('optim_wrapper: AmpOptimWrapper replaced by OptimWrapper (float32)')
    test_cfg = cfg.get('test_cfg')
    if test_cfg and test_cfg.get('fp16'):
        test_cfg.fp16 = False
        _warn('test_cfg.fp16 turned off (testing in float32)')


def _warn(change: str) -> None:
    print_log(f'no accelerator found (mmengine device: cpu): {change}; pass --no-amp-fallback '
              'to keep AMP, which mmengine then refuses', logger='current', level=logging.WARNING)
