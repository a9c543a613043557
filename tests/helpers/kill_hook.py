"""A hook that kills its own process, to simulate a training job killed mid-run.

Imported by test configs through ``custom_imports`` (tests/helpers must be on PYTHONPATH).
"""
import os
import signal

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class KillAfterIterHook(Hook):
    """SIGKILL the process once ``kill_after`` training iterations have run."""

    priority = 'LOWEST'  # after CheckpointHook of the same iteration

    def __init__(self, kill_after: int):
        self.kill_after = kill_after

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
