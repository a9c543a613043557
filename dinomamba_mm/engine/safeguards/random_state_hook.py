"""Checkpoint the random number generators, so that a resumed run draws what it would have."""
import random
from typing import Optional

import numpy as np
import torch
from mmengine.dist import get_rank
from mmengine.hooks import Hook

from dinomamba_mm.registry import HOOKS

CHECKPOINT_KEY = 'random_states'


def capture_random_states() -> dict:
    """Python's, NumPy's and torch's (CPU, and the current CUDA device's once CUDA is
    initialised) generator states.

    Stored as tensors, strings and ints only, so ``torch.load(weights_only=True)`` reads them.
    """
    version, internal, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    states = dict(
        python=dict(version=version, internal=torch.tensor(internal, dtype=torch.int64),
                    gauss_next=gauss_next),
        numpy=dict(kind=kind, keys=torch.from_numpy(keys.astype(np.int64)), pos=int(pos),
                   has_gauss=int(has_gauss), cached_gaussian=float(cached_gaussian)),
        torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state()
    return states


def restore_random_states(states: dict) -> None:
    """Inverse of :func:`capture_random_states`."""
    py = states['python']
    random.setstate((py['version'], tuple(py['internal'].tolist()), py['gauss_next']))
    nps = states['numpy']
    np.random.set_state((nps['kind'], nps['keys'].numpy().astype(np.uint32), nps['pos'],
                         nps['has_gauss'], nps['cached_gaussian']))
    torch.set_rng_state(states['torch'])
    if 'cuda' in states and torch.cuda.is_available():
        cuda = states['cuda']  # earlier versions saved every device's, rank 0's device first
        torch.cuda.set_rng_state(cuda[0] if isinstance(cuda, (list, tuple)) else cuda)


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Save the generator states with every checkpoint; restore them when the run resumes.

    mmengine re-seeds a resumed run from its seed alone, so every draw after the resume point
    differs from the uninterrupted run's: drop path, augmentations run in the main process,
    and the dataloader workers' seeds, which PyTorch draws from the main process's torch
    generator at the start of each epoch (see
    :func:`dinomamba_mm.datasets.seed_worker_from_loader`).
    This hook stores Python's, NumPy's and torch's CPU / current CUDA device's states under
    ``checkpoint['random_states']`` and puts them back in ``before_train`` of a resumed run,
    after mmengine's re-seeding. With non-persistent workers seeded by
    ``seed_worker_from_loader``, a run resumed from an epoch checkpoint then continues loss by
    loss as the uninterrupted run (same number of processes).

    The states saved are rank 0's (mmengine writes checkpoints on rank 0 only). Ranks seeded
    alike (``randomness.diff_rank_seed=False``, mmengine's default) hold the same states, so
    every rank restores them; with ``diff_rank_seed=True`` only rank 0 does.

    Validation leaves the generators as it found them, so that training draws the same whether
    or not a validation ran since the checkpoint.

    Whether the iteration resumed at can be resumed at all (an ``EpochBasedTrainLoop`` resumes
    only at epoch boundaries) is :class:`ResumableCheckpointHook`'s concern.

    Raises:
        ValueError: in ``before_train`` of a resumed run, when the checkpoint has no
            ``random_states`` (saved without this hook).
    """

    priority = 'VERY_HIGH'  # before any hook of before_train could draw a random number

    def __init__(self) -> None:
        self._loaded: Optional[dict] = None

    def before_val(self, runner) -> None:
        # validation (right after a checkpoint, in epoch-based schedules) draws from the
        # generators, e.g. its dataloader's base seed; a resumed run skips it
        self._before_val = capture_random_states()

    def after_val(self, runner) -> None:
        restore_random_states(self._before_val)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = capture_random_states()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        # mmengine calls this for `load_from` too, and before a resume re-seeds: keep it for
        # before_train, which can tell a resume (runner.iter is the checkpoint's) from a load.
        self._loaded = dict(iter=checkpoint.get('meta', {}).get('iter'),
                            states=checkpoint.get(CHECKPOINT_KEY),
                            keys=sorted(checkpoint))

    def before_train(self, runner) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is None or not runner.iter or runner.iter != loaded['iter']:
            return  # not a resume
        if loaded['states'] is None:
            raise ValueError(
                f"the checkpoint resumed at iteration {runner.iter} has no "
                f"'{CHECKPOINT_KEY}' (it was saved without RandomStateHook); its keys are "
                f"{loaded['keys']}. Remove RandomStateHook from custom_hooks to resume it "
                'with freshly seeded generators')
        diff_rank_seed = runner.cfg.get('randomness', {}).get('diff_rank_seed', False)
        if diff_rank_seed and get_rank() != 0:
            return
        restore_random_states(loaded['states'])
