"""Seed dataloader workers from the seed PyTorch draws for them each epoch."""
import os
import random

import numpy as np
import torch
from mmengine.dist import get_rank, is_distributed
from torch.utils.data import get_worker_info

from dinomamba_mm.registry import FUNCTIONS


@FUNCTIONS.register_module()
def seed_worker_from_loader(worker_id: int) -> None:
    """``worker_init_fn`` that seeds Python, NumPy and torch from the worker's PyTorch seed.

    Each time a DataLoader iterator starts (every epoch with ``persistent_workers=False``),
    PyTorch draws a base seed from the main process's torch generator and gives worker ``i``
    the seed ``base + i`` (``get_worker_info().seed``), with which it seeds torch only. This
    function seeds Python's and NumPy's generators too (the transforms draw from them) and
    mixes in the distributed rank, since ranks seeded alike draw the same base seed.

    Unlike mmengine's default (``seed + num_workers * rank + worker_id``, the same streams
    every epoch), each epoch gets new streams; and a resumed run whose main generator
    :class:`dinomamba_mm.RandomStateHook` restored draws the same base seed, hence the same
    augmentations, as the uninterrupted run. Config::

        train_dataloader = dict(
            persistent_workers=False,
            worker_init_fn=dict(type='dinomamba_mm.seed_worker_from_loader'))

    Args:
        worker_id (int): Index of the worker (given by PyTorch).
    """
    info = get_worker_info()
    if info is None:
        raise RuntimeError('seed_worker_from_loader is a DataLoader worker_init_fn; it was '
                           f'called outside a dataloader worker (worker_id={worker_id})')
    rank = get_rank() if is_distributed() else int(os.environ.get('RANK', 0))
    seeds = np.random.SeedSequence([info.seed, rank]).generate_state(2, dtype=np.uint64)
    random.seed(int(seeds[0]))
    np.random.seed(int(seeds[1]) % 2**32)
    torch.manual_seed(int(seeds[1]))
