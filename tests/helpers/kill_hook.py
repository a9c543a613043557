"""A hook that signals its own process, to simulate a training job killed or hung mid-run.

Imported by test configs through ``custom_imports`` (tests/helpers must be on PYTHONPATH).
"""
import os
import signal
from typing import Optional

from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class KillAfterIterHook(Hook):
    """Send ``signal_name`` (SIGKILL; SIGSTOP for a hung process) to the process once
    ``kill_after`` training iterations have run, on process ``rank`` only if given."""

    priority = 'LOWEST'  # after CheckpointHook of the same iteration

    def __init__(self, kill_after: int, signal_name: str = 'SIGKILL',
                 rank: Optional[int] = None):
        self.kill_after = kill_after
        self.signal = getattr(signal, signal_name)
        self.rank = rank

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 >= self.kill_after and self.rank in (None, get_rank()):
            os.kill(os.getpid(), self.signal)
