"""RandomStateHook's generator states, on a stand-in for two CUDA devices.

Under torchrun every process sees every GPU and draws on its own (``torch.cuda.set_device``);
with ranks seeded alike, each process's current-device generator is in rank 0's state. The
oracle: after a restore, the generator a process draws from holds the state rank 0 drew from.
"""
import torch

from dinomamba_mm.engine.safeguards import random_state_hook


class FakeCuda:
    """Per-device generator states (bytes tensors) and a current device."""

    def __init__(self, states, current):
        self.states, self.current = list(states), current

    def install(self, monkeypatch):
        cuda = torch.cuda
        monkeypatch.setattr(cuda, 'is_available', lambda: True)
        monkeypatch.setattr(cuda, 'is_initialized', lambda: True)
        monkeypatch.setattr(cuda, 'get_rng_state', lambda device='cuda': self.states[self.current])
        monkeypatch.setattr(cuda, 'set_rng_state', self._set)
        monkeypatch.setattr(cuda, 'get_rng_state_all', lambda: list(self.states))
        monkeypatch.setattr(cuda, 'set_rng_state_all', lambda states: setattr(
            self, 'states', list(states)))

    def _set(self, state, device='cuda'):
        self.states[self.current] = state


def test_each_process_restores_the_state_rank_0_drew_from(monkeypatch):
    drawn, untouched = torch.tensor([7, 7], dtype=torch.uint8), torch.tensor([1, 1],
                                                                             dtype=torch.uint8)
    FakeCuda([drawn, untouched], current=0).install(monkeypatch)  # rank 0 saves
    states = random_state_hook.capture_random_states()

    rank_1 = FakeCuda([untouched, untouched], current=1)  # a resumed rank 1, fresh seed
    rank_1.install(monkeypatch)
    random_state_hook.restore_random_states(states)
    assert torch.equal(rank_1.states[1], drawn)


def test_checkpoints_with_every_device_state_still_restore(monkeypatch):
    drawn, untouched = torch.tensor([7, 7], dtype=torch.uint8), torch.tensor([1, 1],
                                                                             dtype=torch.uint8)
    FakeCuda([untouched, untouched], current=0).install(monkeypatch)
    states = dict(random_state_hook.capture_random_states(), cuda=[drawn, untouched])
    rank_1 = FakeCuda([untouched, untouched], current=1)
    rank_1.install(monkeypatch)
    random_state_hook.restore_random_states(states)
    assert torch.equal(rank_1.states[1], drawn)
