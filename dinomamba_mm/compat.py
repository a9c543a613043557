"""Shims for the 2023-era OpenMMLab stack on a modern torch / numpy, each gated on the versions
it is for. docs/faq.md ("Compatibility fixes") lists each one with its reason and its test.

Importing ``dinomamba_mm`` leaves mmengine's, mmcv's and other packages' functions as they are.
Two fixes are applied on that import (:func:`apply_on_import`), because mmengine needs them
before any of our code can run, while it reads a checkpoint or parses ``_base_``:

- :func:`allow_mmengine_checkpoint_globals` (torch >= 2.6): torch's own allow-list;
- :func:`resolve_dinomamba_configs`: our entry in mmengine's package map.

The others are called by our own code paths only:

- :func:`leave_default_statistics_out` (torch >= 2.6, mmengine <= 0.10.7) by
  ``dinomamba_mm.ResumableCheckpointHook`` before each save;
- :func:`init_distributed` (the gloo part: mmengine <= 0.10.7) and
  :func:`unscope_dataloader_functions` (mmengine <= 0.10.7) by ``tools/train.py`` and
  ``tools/test.py``, with :func:`quiet_pkg_resources` around their config parsing;
- :func:`adjust_hue` (mmcv <= 2.2.0 with numpy >= 2) by the colour jitter of
  ``dinomamba_mm.DINOMultiCrop``.

Unsafe checkpoint loading is never a fallback: a checkpoint holding objects the safe unpickler
refuses is an error that names the opt-in, torch's own ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``
(:func:`dinomamba_mm.checkpoints.files.load_local`).
"""
import argparse
import contextlib
import datetime
import warnings
from typing import Iterator, MutableMapping

import numpy as np
import torch
from mmengine import __version__ as MMENGINE_VERSION
from mmengine.config import utils as config_utils
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.utils import digit_version

SCOPE = 'dinomamba_mm'
_DEFAULT_STATISTICS = ('min', 'max', 'current', 'mean')

#: torch.load defaults to the safe unpickler (weights_only=True) from torch 2.6.
TORCH_LOADS_WEIGHTS_ONLY = digit_version(torch.__version__) >= digit_version('2.6.0')
#: the last mmengine release checked: 0.10.7 (the mmengine fixes below are for <= 0.10.7).
MMENGINE_CHECKED = digit_version(MMENGINE_VERSION) <= digit_version('0.10.7')


def _numpy_safe_globals() -> list:
    """The numpy objects an ndarray or a numpy scalar needs to be unpickled."""
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    dtype_classes = [type(np.dtype(code)) for code in '?bBhHiIlLqQefdgFDGSUV']
    return [np.ndarray, np.dtype, _reconstruct, scalar, *dtype_classes]


def allow_mmengine_checkpoint_globals() -> None:
    """Let torch's safe unpickler rebuild what mmengine and the paper put in checkpoints.

    mmengine 0.10.7 checkpoints hold a MessageHub (``HistoryBuffer`` objects with numpy arrays and
    scalars), the paper's DINO checkpoints an ``argparse.Namespace``; torch >= 2.6 refuses both
    unless allow-listed (``torch.serialization.add_safe_globals``, torch's own mechanism).
    mmengine's Runner reads ``load_from`` and resumed checkpoints itself, hence on import.
    """
    torch.serialization.add_safe_globals(
        [HistoryBuffer, argparse.Namespace, *_numpy_safe_globals()])


def resolve_dinomamba_configs() -> None:
    """Let ``_base_ = 'dinomamba_mm::...'`` find this package's configs.

    mmengine parses ``_base_`` before it runs ``custom_imports``, and knows only the packages of
    its hard-coded ``MODULE2PACKAGE`` (config scope -> pip distribution); it then looks for the
    configs at ``get_installed_path(distribution)/.mim``. mmengine <= 0.10.7 takes that path next
    to the distribution's metadata, which an editable install keeps away from the package; for a
    name that is no installed distribution it takes the folder of the module importlib finds.
    So our entry names a module of this package: the configs are found wherever it was
    imported from (a wheel, an editable install, ``PYTHONPATH``), and no mmengine function is
    replaced. Other mmengine versions get the distribution's name.
    """
    target = f'{SCOPE}.registry' if MMENGINE_CHECKED else SCOPE
    config_utils.MODULE2PACKAGE.setdefault(SCOPE, target)


def apply_on_import() -> None:
    """The fixes mmengine needs before our code runs (idempotent; see the module docstring)."""
    if TORCH_LOADS_WEIGHTS_ONLY:
        allow_mmengine_checkpoint_globals()
    resolve_dinomamba_configs()


class _SavedHistoryBuffer(HistoryBuffer):
    """A ``HistoryBuffer`` that pickles as a plain one without the default statistics functions
    (``HistoryBuffer.__setstate__`` registers them again when it is read)."""

    def __reduce_ex__(self, protocol):
        state = {k: v for k, v in vars(self).items() if k != 'statistics_methods'}
        custom = {name: fn for name, fn in self._statistics_methods.items()
                  if name not in _DEFAULT_STATISTICS}
        if custom:
            state['statistics_methods'] = custom
        return HistoryBuffer, (), state


def leave_default_statistics_out(message_hub_state: MutableMapping) -> None:
    """Save the history buffers of a message hub's ``state_dict`` without their default
    statistics functions, in place.

    mmengine 0.10.7 pickles them (``HistoryBuffer.min`` ...) as ``builtins.getattr``
    references, which torch's safe unpickler can never allow, so a checkpoint written by the
    Runner could not be resumed on torch >= 2.6. The file holds plain ``HistoryBuffer``
    objects, as mmengine writes them, less those references. A no-op on other versions.

    Args:
        message_hub_state (dict): ``checkpoint['message_hub']`` (``MessageHub.state_dict()``).
    """
    if not (TORCH_LOADS_WEIGHTS_ONLY and MMENGINE_CHECKED):
        return
    scalars = message_hub_state.get('log_scalars', {})
    for key, buffer in scalars.items():
        if type(buffer) is HistoryBuffer:
            saved = _SavedHistoryBuffer.__new__(_SavedHistoryBuffer)
            saved.__dict__.update(vars(buffer))
            scalars[key] = saved


def init_distributed(launcher: str, env_cfg: dict) -> None:
    """Start the process group of a distributed run before mmengine's Runner is built (which
    then uses it), as the Runner would: ``set_multi_processing`` with ``env_cfg.mp_cfg``, then
    ``init_dist`` with ``env_cfg.dist_cfg``.

    On a machine without an accelerator, ``launcher='pytorch'`` (``tools/dist_train.sh``) gets
    a gloo process group: mmengine <= 0.10.7 calls ``torch.cuda.set_device(LOCAL_RANK)``
    unconditionally and uses the config's backend (nccl). DDP's ``device_ids`` are the configs'
    ``model_wrapper_cfg``. Nothing is done for ``launcher='none'`` or when a process group
    exists.

    Args:
        launcher (str): 'none', 'pytorch', 'slurm' or 'mpi'.
        env_cfg (dict): the config's ``env_cfg`` (``mp_cfg``, ``dist_cfg``).
    """
    import torch.distributed as torch_dist
    from mmengine.device import get_device
    from mmengine.dist import init_dist, is_distributed
    from mmengine.utils.dl_utils import set_multi_processing

    if launcher == 'none' or is_distributed():
        return
    set_multi_processing(**env_cfg.get('mp_cfg', {}), distributed=True)
    dist_cfg = dict(env_cfg.get('dist_cfg', {}))
    if launcher == 'pytorch' and MMENGINE_CHECKED and get_device() in ('cpu', 'mps'):
        timeout = dist_cfg.get('timeout')
        kwargs = {} if timeout is None else dict(timeout=datetime.timedelta(seconds=timeout))
        # torchrun sets RANK / WORLD_SIZE / MASTER_ADDR; nccl needs a GPU, gloo does not
        torch_dist.init_process_group(backend='gloo', **kwargs)
        return
    init_dist(launcher, **dist_cfg)


_DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
_DATALOADER_FUNCTIONS = ('collate_fn', 'worker_init_fn')


def unscope_dataloader_functions(cfg: MutableMapping) -> None:
    """Let a dataloader's ``collate_fn`` / ``worker_init_fn`` come from a ``pkg::`` base.

    mmengine stamps ``_scope_`` on every dict with a ``type`` of a ``_base_ = 'pkg::...'``
    config; ``Runner.build_dataloader`` (mmengine <= 0.10.7) looks these two functions up
    itself and passes every other key to them, so ``default_collate`` fails with "unexpected
    keyword argument '_scope_'" (open-mmlab/mmyolo#886). The scope is dropped from ``cfg`` in
    place: the functions are looked up as before (explicitly scoped names like
    ``dinomamba_mm.seed_worker_from_loader`` keep their prefix). A no-op on other versions.

    Args:
        cfg (Config): the whole config.
    """
    if not MMENGINE_CHECKED:
        return
    for loader in _DATALOADERS:
        loader_cfg = cfg.get(loader)
        if not isinstance(loader_cfg, MutableMapping):
            continue
        for key in _DATALOADER_FUNCTIONS:
            function_cfg = loader_cfg.get(key)
            if isinstance(function_cfg, MutableMapping):
                function_cfg.pop('_scope_', None)


@contextlib.contextmanager
def quiet_pkg_resources() -> Iterator[None]:
    """Hide setuptools' "pkg_resources is deprecated" warning inside the block.

    mmengine <= 0.10.7 imports (and reloads) ``pkg_resources`` to find a ``pkg::`` base;
    setuptools >= 67.5 warns on every such import, in every log of a config that inherits one.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', 'pkg_resources is deprecated', UserWarning)
        yield


def adjust_hue(img: np.ndarray, hue_factor: float, backend=None) -> np.ndarray:
    """``mmcv.adjust_hue`` (same arguments and checks) that also works on numpy >= 2.

    mmcv <= 2.2.0 computes ``np.uint8(hue_factor * 255)``, which numpy >= 2 refuses
    (OverflowError) for every negative factor, so half of the colour-jittered images failed. This
    shifts the hue channel by the same amount modulo 256 (numpy 1's uint8 wrap-around); other
    versions run mmcv's own.

    Args:
        img (ndarray): (H, W, 3) BGR image; uint8 for the pillow backend.
        hue_factor (float): hue shift in turns, in [-0.5, 0.5].
        backend (str, optional): 'cv2' or 'pillow'; None uses mmcv's image backend.
    """
    import cv2
    import mmcv
    from mmcv.image import photometric
    from PIL import Image

    if digit_version(np.__version__) < digit_version('2.0.0') or \
            digit_version(mmcv.__version__) > digit_version('2.2.0'):
        return mmcv.adjust_hue(img, hue_factor, backend=backend)
    backend = backend or photometric.imread_backend
    if backend not in ('cv2', 'pillow'):
        raise ValueError(f"backend: {backend} is not supported. Supported backends are "
                         "'cv2', 'pillow'")
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f'hue_factor:{hue_factor} is not in [-0.5, 0.5].')
    if not (isinstance(img, np.ndarray) and img.ndim in (2, 3)):
        raise TypeError('img should be ndarray with dim=[2 or 3].')
    shift = int(hue_factor * 255) % 256

    if backend == 'pillow':
        if img.dtype != np.uint8:
            raise ValueError(f'the pillow backend needs a uint8 image, got {img.dtype}')
        h, s, v = Image.fromarray(np.ascontiguousarray(img[..., ::-1]), mode='RGB') \
            .convert('HSV').split()
        h = Image.fromarray(((np.asarray(h, dtype=np.uint16) + shift) % 256)
                            .astype(np.uint8), 'L')
        rgb = Image.merge('HSV', (h, s, v)).convert('RGB')
        return np.array(rgb, dtype=img.dtype)[..., ::-1]
    dtype = img.dtype
    h, s, v = cv2.split(cv2.cvtColor(img.astype(np.uint8), cv2.COLOR_BGR2HSV_FULL))
    h = ((h.astype(np.uint16) + shift) % 256).astype(np.uint8)
    return cv2.cvtColor(cv2.merge([h, s, v]), cv2.COLOR_HSV2BGR_FULL).astype(dtype)
