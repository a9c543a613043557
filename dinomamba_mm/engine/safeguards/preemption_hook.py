"""Save a resumable checkpoint when the job is told to stop (SIGTERM, SIGUSR1), then exit."""
import contextlib
import os.path as osp
import signal
from typing import Iterator, List, Optional

import torch
from mmengine import dist
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop, IterBasedTrainLoop

from dinomamba_mm.engine.hook_options import checked_options
from dinomamba_mm.registry import HOOKS
from .atomic_local_backend import AtomicLocalBackend  # noqa: F401  (registers 'atomic_local')
from .random_state_hook import capture_random_states, restore_random_states
from .run_guards import check_same_epoch_length

#: the exit status of a run stopped by a signal after its checkpoint was saved: sysexits.h's
#: EX_TEMPFAIL ("a temporary failure; the user is invited to retry"), told apart from 0 (done),
#: 1 (an error) and 128 + N (killed by signal N)
PREEMPTED_EXIT_CODE = 75
#: the signals a scheduler sends before it stops a job (slurm: SIGTERM on preemption or
#: scancel, the signal of ``--signal`` before the time limit; SIGUSR1 in tools/slurm_train.sh)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: checkpoint key of what continues a run inside an epoch
CHECKPOINT_KEY = 'resume_position'
#: ``meta`` key naming the signal a checkpoint was saved on
META_KEY = 'preempted_by'

_received: List[int] = []  # the signals caught, in this process
_catching = [False]


def _record(signum: int, frame) -> None:
    _received.append(signum)


@contextlib.contextmanager
def catch_stop_signals() -> Iterator[None]:
    """Record SIGTERM and SIGUSR1 (for :class:`PreemptionHook`) instead of dying of them, while
    the block runs; the previous handlers come back afterwards.

    ``tools/train.py`` enters it before the Runner builds anything, so that every dataloader
    worker forked inside inherits the handler: slurm signals every process of a job step, and
    a worker killed by the signal would end the run before its checkpoint is saved. A worker
    only records the signal; the main process saves and ends the run, which stops the workers.
    """
    previous = {signum: signal.signal(signum, _record) for signum in STOP_SIGNALS}
    _catching[0] = True
    try:
        yield
    finally:
        _catching[0] = False
        _received.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class TrainingPreempted(SystemExit):
    """Raised after the checkpoint of a signalled run is saved; exits with
    :data:`PREEMPTED_EXIT_CODE` unless caught."""

    def __init__(self, message: str) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message


class _RestoreAfterReplay:
    """The train loop's data iterator, which puts ``states`` back into the generators right
    before batch ``replayed + 1`` is drawn, after mmengine's ``IterBasedTrainLoop`` drew and
    dropped the ``replayed`` batches trained before the checkpoint."""

    def __init__(self, loop, replayed: int, states: dict) -> None:
        self.loop, self.inner = loop, loop.dataloader_iterator
        self.replayed, self.states = replayed, states

    def __iter__(self):
        return self

    def __next__(self):
        if self.replayed == 0:
            restore_random_states(self.states)
            self.loop.dataloader_iterator = self.inner
            return next(self.inner)
        self.replayed -= 1
        return next(self.inner)


@HOOKS.register_module()
@checked_options
class PreemptionHook(Hook):
    """On SIGTERM or SIGUSR1, save a checkpoint at the end of the current training iteration
    and stop the run with exit status :data:`PREEMPTED_EXIT_CODE` (75); ``--resume`` then
    continues loss by loss as the uninterrupted run.

    What a scheduler sends before it stops a job (slurm: SIGTERM on preemption or ``scancel``,
    ``--signal=USR1@120`` 120 s before the time limit) no longer costs the iterations since the
    last periodic checkpoint: at most the iteration running when the signal came. The
    checkpoint is ``iter_N.pth`` (N iterations done; skipped when the checkpoint hook has just
    saved that file), written like the checkpoint hook's (its ``out_dir`` and backend, atomic
    with :class:`ResumableCheckpointHook`), named by ``last_checkpoint`` and
    ``meta['preempted_by']``. In a distributed run the ranks all-reduce the signal at every
    iteration boundary, so all stop after the same iteration (the signal may reach them at
    different times, or one only) and leave together once rank 0 has written the file.

    A signal during validation or data loading is acted on at the end of the next training
    iteration. Every checkpoint saved while this hook is in the run records the generator
    states at the start of the epoch and at the save, so that a run resumed inside an epoch
    continues exactly:

    - ``EpochBasedTrainLoop`` (which restarts an epoch from its first batch): the resumed
      epoch draws the batches already trained and drops them (the sampler's order and the
      workers' augmentations as in the uninterrupted run), from the generator states of the
      epoch's start, then puts back those of the save and trains on from the next batch, with
      the batch indices of the uninterrupted run. The epoch's first batches are loaded again,
      not trained: as mmengine's ``IterBasedTrainLoop`` does.
    - ``IterBasedTrainLoop`` (which draws and drops the batches already trained): the
      generator states of the save are put back after those draws, not before (main-process
      augmentations drew from them).

    ``tools/train.py`` adds it (off: ``--no-preemption-checkpoint``) and catches the signals
    from the start (:func:`catch_stop_signals`); in a config of another tool it catches them
    from ``before_train`` on.
    """

    priority = 'LOWEST'  # after the hooks of the iteration, the checkpoint hook's save included

    def __init__(self) -> None:
        self._own_handlers: Optional[contextlib.ExitStack] = None
        self._epoch_start: Optional[dict] = None
        self._loaded: Optional[dict] = None

    def before_train(self, runner) -> None:
        if not _catching[0]:
            self._own_handlers = contextlib.ExitStack()
            self._own_handlers.enter_context(catch_stop_signals())
        loaded, self._loaded = self._loaded, None
        if loaded is None or not runner.iter or runner.iter != loaded['iter'] or \
                loaded['position'] is None:
            return  # not resumed from a checkpoint of a run with this hook
        loop = runner.train_loop
        position = loaded['position']
        if not self._restores_here(runner):
            position = dict(position, random_states=None, epoch_random_states=None)
        if isinstance(loop, EpochBasedTrainLoop):
            epoch_length = len(loop.dataloader)
            check_same_epoch_length(
                runner, position['batches_per_epoch'], loaded['name'])
            done = runner.iter - runner.epoch * epoch_length
            if 0 < done <= epoch_length:
                loop.run_epoch = lambda: self._continue_epoch(runner, done, position)
        elif isinstance(loop, IterBasedTrainLoop) and position['random_states'] is not None:
            loop.dataloader_iterator = _RestoreAfterReplay(loop, runner.iter,
                                                           position['random_states'])

    def before_train_epoch(self, runner) -> None:
        self._epoch_start = capture_random_states()

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = dict(
            random_states=capture_random_states(), epoch_random_states=self._epoch_start,
            batches_per_epoch=len(runner.train_dataloader))

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        # called for load_from too, before a resume sets runner.iter: told apart in before_train
        meta = checkpoint.get('meta', {})
        self._loaded = dict(iter=meta.get('iter'), position=checkpoint.get(CHECKPOINT_KEY),
                            name=osp.basename(runner.cfg.get('load_from') or ''))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        signum = _received[0] if _received else 0
        if dist.is_distributed():
            flag = torch.tensor(signum)
            dist.all_reduce(flag, op='max')
            signum = int(flag)
        if signum:
            self._save_and_stop(runner, signal.Signals(signum).name)

    def after_train(self, runner) -> None:
        self._release_handlers()

    def _release_handlers(self) -> None:
        if self._own_handlers is not None:
            self._own_handlers.close()
            self._own_handlers = None

    @staticmethod
    def _restores_here(runner) -> bool:
        # the states saved are rank 0's; ranks seeded alike hold the same (RandomStateHook)
        return not runner.cfg.get('randomness', {}).get('diff_rank_seed', False) or \
            dist.get_rank() == 0

    def _continue_epoch(self, runner, done: int, position: dict) -> None:
        """``EpochBasedTrainLoop.run_epoch`` (mmengine 0.10.7) for an epoch of which ``done``
        batches were trained before the checkpoint; the loop's own afterwards."""
        loop = runner.train_loop
        del loop.run_epoch  # the class's method from the next epoch on
        runner.call_hook('before_train_epoch')
        if position['epoch_random_states'] is not None:
            restore_random_states(position['epoch_random_states'])
            self._epoch_start = position['epoch_random_states']
        runner.model.train()
        if done < len(loop.dataloader):  # else saved after its last batch: the epoch ends
            batches = iter(loop.dataloader)
            print_log(f'resuming inside epoch {runner.epoch + 1}: drawing and dropping its '
                      f'{done} batches trained before the checkpoint', logger='current')
            for _ in range(done):
                next(batches)
        if position['random_states'] is not None:
            restore_random_states(position['random_states'])
        if done < len(loop.dataloader):
            for idx, data_batch in enumerate(batches, start=done):
                loop.run_iter(idx, data_batch)
        runner.call_hook('after_train_epoch')
        loop._epoch += 1

    def _save_and_stop(self, runner, name: str) -> None:
        checkpoint_hook = next((hook for hook in runner.hooks
                                if isinstance(hook, CheckpointHook)), None)
        filename = f'iter_{runner.iter + 1}.pth'
        out_dir = getattr(checkpoint_hook, 'out_dir', None) or runner.work_dir
        path = osp.join(out_dir, filename)
        if runner.message_hub.get_info('last_ckpt') == path:
            print_log(f'{name} received: {path} of this iteration is saved', logger='current')
        else:
            file_client_args = getattr(checkpoint_hook, 'file_client_args', None)
            backend_args = getattr(checkpoint_hook, 'backend_args', None)
            if file_client_args is None and backend_args is None:
                backend_args = dict(backend='atomic_local')
            runner.save_checkpoint(
                out_dir, filename, file_client_args,
                save_optimizer=getattr(checkpoint_hook, 'save_optimizer', True),
                save_param_scheduler=getattr(checkpoint_hook, 'save_param_scheduler', True),
                meta={META_KEY: name}, by_epoch=False, backend_args=backend_args)
            if dist.is_main_process():
                with open(osp.join(runner.work_dir, 'last_checkpoint'), 'w') as f:
                    f.write(path)
        dist.barrier()  # no rank leaves (its launcher then stops the others) before the save
        self._release_handlers()
        message = (f'{name} received: training stopped after iteration {runner.iter + 1} of '
                   f'{runner.max_iters}, saved in {path}. Continue it with tools/train.py '
                   f'--resume (exit status {PREEMPTED_EXIT_CODE})')
        print_log(message, logger='current')
        raise TrainingPreempted(message)
