"""The training safeguards this project adds to mmengine's Runner, in one place.

Put in by our configs (drop the entry to turn one off):

- :class:`NonFiniteStepHook` (``custom_hooks``): skips optimizer steps with a non-finite loss or
  gradient, stops a run that keeps producing them or whose weights became non-finite;
- :class:`RandomStateHook` (``custom_hooks``): checkpoints the random generators, so that a
  resumed run draws what the uninterrupted one would have;
- :class:`ResumableCheckpointHook` (``default_hooks.checkpoint``): atomic saves
  (:class:`AtomicLocalBackend`), the oldest checkpoint removed only once the newest is complete,
  unresumable checkpoints refused when training starts, checkpoints the safe unpickler reads;
- :class:`BackboneLayoutHook` (``default_hooks.backbone_layout``): records and checks the token
  layout of the backbones in checkpoints;
- :func:`seed_worker_from_loader` (``worker_init_fn``): new streams every epoch, the same after a
  resume.

Put in by ``tools/train.py`` / ``tools/test.py`` (the stock tools of mmpretrain, mmseg and mmdet
run the same configs without any of them):

- :class:`StrictLoadHook` (off: ``--no-strict-load``);
- :class:`SafeUnpickleHook` (training): checkpoints the safe unpickler reads, whichever hook
  saves them (a compatibility fix, on torch >= 2.6 with mmengine <= 0.10.7 only);
- :func:`fall_back_to_fp32_without_accelerator` (off: ``--no-amp-fallback``);
- :func:`check_dataset_paths` and the run guards (:mod:`.run_guards`): missing dataset paths,
  a training of no length, unread ``--cfg-options``, a second run in a work dir in use, a process
  that stopped answering.

Nothing in :mod:`dinomamba_mm.models` imports this package.
"""
from .amp_fallback import fall_back_to_fp32_without_accelerator, has_amp_device
from .atomic_local_backend import AtomicLocalBackend
from .backbone_layout_hook import BackboneLayoutHook
from .dataset_paths import check_dataset_paths
from .non_finite_step_hook import NonFiniteStepHook
from .random_state_hook import RandomStateHook
from .resumable_checkpoint_hook import ResumableCheckpointHook
from .run_guards import (add_custom_hook, check_train_length, explain_stopped_process,
                         lock_work_dir, warn_unread_cfg_options)
from .safe_unpickle_hook import SafeUnpickleHook
from .strict_load_hook import StrictLoadHook, add_strict_load_hook
from .worker_seed import seed_worker_from_loader

__all__ = [
    'AtomicLocalBackend', 'BackboneLayoutHook', 'NonFiniteStepHook', 'RandomStateHook',
    'ResumableCheckpointHook', 'SafeUnpickleHook', 'StrictLoadHook', 'add_custom_hook',
    'add_strict_load_hook', 'check_dataset_paths',
    'check_train_length', 'explain_stopped_process', 'fall_back_to_fp32_without_accelerator',
    'has_amp_device', 'lock_work_dir', 'seed_worker_from_loader', 'warn_unread_cfg_options'
]
