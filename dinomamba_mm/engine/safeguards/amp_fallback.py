"""Float32 in place of AMP on a machine without an accelerator (tools/train.py, tools/test.py)."""
import logging

from mmengine.config import Config
from mmengine.device import (is_cuda_available, is_mlu_available, is_musa_available,
                             is_npu_available)
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
    if has_amp_device():
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


def has_amp_device() -> bool:
    """Whether this machine has a device ``AmpOptimWrapper`` accepts (mmengine 0.10.7's test)."""
    return (is_cuda_available() or is_npu_available() or is_mlu_available()
            or is_musa_available())


def _warn(change: str) -> None:
    print_log(f'no accelerator found (CUDA / NPU / MLU / MUSA): {change}; pass '
              '--no-amp-fallback to keep AMP, which mmengine then refuses', logger='current',
              level=logging.WARNING)
