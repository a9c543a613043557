"""What tools/train.py and tools/test.py check around mmengine's Runner: unread config keys,
the training length, the epoch length a resumed run was saved with, one training run per work
dir, a process that stopped answering; and how they add a hook of ours to a config."""
import contextlib
import difflib
import fcntl
import inspect
import os
import os.path as osp
import socket
import sys
from typing import Iterator, Optional

import torch.distributed as torch_dist
from mmengine.config import Config
from mmengine.dist import get_world_size
from mmengine.logging import print_log
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from dinomamba_mm.argument_checks import check_int

#: top-level keys mmengine and tools/test.py read besides the Runner's arguments
OTHER_READ_KEYS = ('_base_', 'custom_imports', 'runner_type', 'model_wrapper_cfg', 'sync_bn',
                   'find_unused_parameters', 'compile', 'activation_checkpointing',
                   'efficient_conv_bn_eval', 'tta_model', 'tta_pipeline')
RANK_VARIABLES = dict(pytorch='RANK', slurm='SLURM_PROCID', mpi='OMPI_COMM_WORLD_RANK')


def warn_unread_cfg_options(cfg: Config, options: Optional[dict]) -> None:
    """Warn about each ``--cfg-options`` entry (to be merged into ``cfg``) whose top-level
    key neither ``cfg`` has nor the Runner reads, naming the closest key that is read."""
    runner_class = RUNNERS.get(cfg.get('runner_type', 'Runner')) or Runner
    known = [*inspect.signature(runner_class.__init__).parameters, *OTHER_READ_KEYS, *cfg]
    for key, value in (options or {}).items():
        top = key.split('.')[0]
        if top in known:
            continue
        close = difflib.get_close_matches(top, known, n=1)
        print_log(f"--cfg-options {key}={value}: no part of mmengine's Runner or of this "
                  f"config reads a top-level key {top!r}, so it changes nothing"
                  + (f' (did you mean {close[0]!r}?)' if close else ''),
                  logger='current', level=30)


def add_custom_hook(cfg: Config, hook: dict) -> None:
    """Append ``hook`` to ``cfg.custom_hooks`` unless a hook of its type is there already."""
    hooks = list(cfg.get('custom_hooks', None) or [])
    kind = hook['type'].split('.')[-1]
    if not any(str(other.get('type', '')).split('.')[-1] == kind for other in hooks):
        hooks.append(hook)
    cfg.custom_hooks = hooks


def check_train_length(cfg: Config) -> None:
    """ValueError for ``train_cfg.max_epochs`` / ``max_iters`` < 1 (mmengine trains nothing)."""
    train_cfg = cfg.get('train_cfg') or {}
    for key in ('max_epochs', 'max_iters'):
        if key in train_cfg:
            check_int(f'train_cfg.{key}', train_cfg[key], 1)


def check_same_epoch_length(runner, saved_length: Optional[int], name: str) -> None:
    """ValueError unless the training epoch of ``runner`` has ``saved_length`` iterations, as
    the run that saved checkpoint ``name`` (None: unknown, nothing to compare)."""
    loader = runner.train_dataloader
    epoch_length = len(loader)
    if saved_length in (None, epoch_length):
        return
    raise ValueError(
        f'cannot resume from {name} (epoch {runner.epoch}, iteration {runner.iter}): it was '
        f'saved with {saved_length} iterations per epoch, this run has {epoch_length} '
        f'({len(loader.dataset)} samples, batch size {loader.batch_size} per process, '
        f'{get_world_size()} process(es)): the batch size, the dataset or the number of '
        'processes changed. Resume with the ones it was saved with, or start a new run from '
        'its weights (load_from without --resume)')


@contextlib.contextmanager
def lock_work_dir(work_dir: str, launcher: str = 'none') -> Iterator[None]:
    """Hold ``work_dir/.train.lock`` (``fcntl.flock``, on global rank 0 of ``launcher``)
    while the block runs, or raise RuntimeError naming the pid, host and command holding it.
    The system releases the lock of a process that ends in any way, so a killed run leaves
    nothing stuck."""
    if int(os.environ.get(RANK_VARIABLES.get(launcher, ''), 0)):
        yield
        return
    os.makedirs(work_dir, exist_ok=True)
    with open(osp.join(work_dir, '.train.lock'), 'a+') as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise RuntimeError(
                f'{work_dir} is in use by another training run: '
                f'{lock.read().strip() or "its process is starting"}. Wait for it to end, or '
                'train in another --work-dir') from None
        lock.truncate(0)
        print(f'pid {os.getpid()} on {socket.gethostname()}, command: {" ".join(sys.argv)}',
              file=lock, flush=True)
        yield


@contextlib.contextmanager
def explain_stopped_process(cfg: Config) -> Iterator[None]:
    """Turn gloo's timeout of a collective operation into an error saying that a process
    stopped answering (NCCL's watchdog aborts the process itself, with its own message)."""
    try:
        yield
    except RuntimeError as error:
        if not (torch_dist.is_initialized() and 'Timed out waiting' in str(error)):
            raise
        timeout = cfg.get('env_cfg', {}).get('dist_cfg', {}).get('timeout', 1800)
        raise RuntimeError(
            f'a process of the run stopped answering: no reply within {timeout} s '
            '(env_cfg.dist_cfg.timeout) in a collective operation of rank '
            f'{torch_dist.get_rank()} of {torch_dist.get_world_size()}. Another process hung, '
            'was stopped or lost its node; if one is just slow (a long evaluation or save), '
            f'raise the timeout. {type(error).__name__}: {error}') from error
