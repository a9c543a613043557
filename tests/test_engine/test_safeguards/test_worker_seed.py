"""seed_worker_from_loader: new streams each epoch, the same streams after a restored seed."""
import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from dinomamba_mm.engine.safeguards import seed_worker_from_loader


class Draws(Dataset):
    """Each item: one draw from Python's, NumPy's and torch's generators in the worker."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.tensor([random.random(), np.random.rand(), torch.rand(()).item()],
                            dtype=torch.float64)


def epoch_draws(loader):
    return torch.cat(list(loader)).numpy()


def test_streams_change_each_epoch_and_follow_the_main_generator():
    loader = DataLoader(Draws(), batch_size=2, num_workers=1, persistent_workers=False,
                        worker_init_fn=seed_worker_from_loader)
    torch.manual_seed(0)
    first, second = epoch_draws(loader), epoch_draws(loader)
    # each generator seeded by the function (not left as the fork's copy of the parent's)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    again = epoch_draws(loader)
    assert not np.allclose(first, second)  # epoch 2 draws new values
    np.testing.assert_array_equal(first, again)  # same main generator state, same draws
    # Python's and NumPy's generators in the worker are reseeded from the worker's seed, so
    # the parent's state of those two (changed above) does not leak into the worker
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(0)
    np.testing.assert_array_equal(first, epoch_draws(loader))


def test_rank_changes_the_streams(monkeypatch):
    loader = DataLoader(Draws(), batch_size=4, num_workers=1,
                        worker_init_fn=seed_worker_from_loader)
    torch.manual_seed(0)
    rank0 = epoch_draws(loader)
    monkeypatch.setenv('RANK', '1')
    torch.manual_seed(0)
    rank1 = epoch_draws(loader)
    assert not np.allclose(rank0, rank1)


def test_outside_a_worker_is_an_error():
    with pytest.raises(RuntimeError, match='worker_init_fn.*worker_id=3'):
        seed_worker_from_loader(3)
