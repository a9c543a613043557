"""tools/train.py fits the dataloaders to the machine (workers, pinned memory) unless told
otherwise, and names the images, batch size and drop_last when the training data gives no full
batch (mmengine would fail on "`epoch_length` must be a positive integer, but got 0")."""
import os.path as osp
import sys
from types import SimpleNamespace

import pytest
from mmengine.config import Config
from mmengine.dataset import DefaultSampler, InfiniteSampler
from torch.utils.data import DataLoader

sys.path.insert(0, osp.join(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from helpers.tools import load_tool  # noqa: E402

train = load_tool('tools/train.py')
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def _config(workers: int = 10, pin_memory: bool = True) -> Config:
    loader = dict(batch_size=2, num_workers=workers, pin_memory=pin_memory, dataset=dict())
    return Config(dict(train_dataloader=loader, val_dataloader=loader, test_dataloader=None))


@pytest.fixture
def machine(monkeypatch):
    """A machine with ``cores`` CPU cores for this process and ``accelerator`` or not."""
    def set_machine(cores: int, accelerator: bool, local_processes=None):
        monkeypatch.setattr(train.os, 'sched_getaffinity', lambda pid: set(range(cores)))
        monkeypatch.setattr(train.torch.accelerator, 'is_available', lambda: accelerator)
        if local_processes is None:
            monkeypatch.delenv('LOCAL_WORLD_SIZE', raising=False)
        else:
            monkeypatch.setenv('LOCAL_WORLD_SIZE', str(local_processes))
    return set_machine


def test_workers_capped_at_the_cores_and_no_pinning_without_accelerator(machine):
    machine(cores=2, accelerator=False)
    cfg = _config()
    train.fit_dataloaders_to_machine(cfg, None)
    for name in ('train_dataloader', 'val_dataloader'):
        assert (cfg[name].num_workers, cfg[name].pin_memory) == (2, False)
    assert cfg.test_dataloader is None


def test_the_cores_are_shared_by_the_local_processes_and_pinning_kept_with_accelerator(
        machine):
    machine(cores=8, accelerator=True, local_processes=2)
    cfg = _config()
    train.fit_dataloaders_to_machine(cfg, None)
    assert (cfg.train_dataloader.num_workers, cfg.train_dataloader.pin_memory) == (4, True)
    machine(cores=2, accelerator=False, local_processes=4)  # never fewer than one worker
    cfg = _config()
    train.fit_dataloaders_to_machine(cfg, None)
    assert cfg.train_dataloader.num_workers == 1


def test_fewer_workers_than_cores_and_values_given_on_the_command_line_are_kept(machine):
    machine(cores=2, accelerator=False)
    cfg = _config(workers=0)
    train.fit_dataloaders_to_machine(cfg, None)
    assert cfg.train_dataloader.num_workers == 0
    cfg = _config()
    options = {'train_dataloader.num_workers': 10, 'train_dataloader.pin_memory': True}
    cfg.merge_from_dict(options)
    train.fit_dataloaders_to_machine(cfg, options)
    assert (cfg.train_dataloader.num_workers, cfg.train_dataloader.pin_memory) == (10, True)
    assert (cfg.val_dataloader.num_workers, cfg.val_dataloader.pin_memory) == (2, False)


def test_the_changes_are_logged(machine, logged):
    machine(cores=2, accelerator=False)
    train.fit_dataloaders_to_machine(_config(), None)
    out = '\n'.join(logged)
    assert ('dataloaders fitted to this machine (2 CPU cores for 1 process(es), no '
            'accelerator): train_dataloader.num_workers 10 -> 2, train_dataloader.pin_memory '
            'True -> False, val_dataloader.num_workers 10 -> 2') in out, out


def _runner(images: int, batch_size: int = 4, drop_last: bool = True, infinite=False):
    dataset = list(range(images))
    sampler = (InfiniteSampler if infinite else DefaultSampler)(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=batch_size, drop_last=drop_last, sampler=sampler)
    return SimpleNamespace(train_loop=SimpleNamespace(dataloader=loader))


@pytest.mark.parametrize('images', [0, 3])
def test_no_full_batch_is_an_error_naming_the_numbers(images):
    expected = (f'its dataset has 3 images, fewer than batch_size 4, and drop_last=True drops '
                'an incomplete batch, so an epoch would train nothing. Add images, or lower '
                'the batch size (e.g. --cfg-options train_dataloader.batch_size=3)' if images
                else 'its dataset has no images')
    with pytest.raises(ValueError, match=r'train_dataloader gives no (full )?batch: ' +
                       expected.replace('(', r'\(').replace(')', r'\)').replace('.', r'\.')):
        train.check_full_batches(_runner(images))


@pytest.mark.parametrize('images,batch_size,drop_last,infinite,length', [
    (5, 4, True, False, '1 batches per epoch'), (3, 4, False, False, '1 batches per epoch'),
    (3, 4, True, True, 'an infinite sampler')])
def test_a_full_batch_or_an_infinite_sampler_is_logged(images, batch_size, drop_last, infinite,
                                                       length, logged):
    """An infinite sampler (iteration-based runs) repeats the images: a batch always fills."""
    runner = _runner(images, batch_size, drop_last, infinite)
    train.check_full_batches(runner)
    assert len(next(iter(runner.train_loop.dataloader))) == (batch_size if infinite else
                                                             min(images, batch_size))
    assert logged == [f'train_dataloader: {images} images, batch_size {batch_size}, drop_last '
                      f'{drop_last}: {length}']
