"""Shared input builders for the SSD tests (torch path and API): random, small, reproducible."""
from typing import Dict, Optional

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny per-step ops: a second intra-op thread only adds waits on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_inputs(batch: int = 2, length: int = 7, heads: int = 4, headdim: int = 3,
                groups: int = 1, dstate: int = 5, seed: int = 0, D: Optional[str] = None,
                z: bool = False, dt_bias: bool = False, initial_states: bool = False,
                softplus: bool = True, A_range=(0.01, 0.3)) -> Dict[str, torch.Tensor]:
    """float64 inputs of ``ssd_scan`` (only the optional ones asked for are present).

    D is None, 'H' for shape (H,) or 'HP' for shape (H, P). Decays are slow (dt' ~ 0.13,
    |A| <= 0.3) so that states matter across several chunks: a bug in the state passing shows.
    With ``softplus`` the raw dt sits around -2 (softplus ~ 0.13); without it dt is in [0.02, 0.2].
    """
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    lo, hi = A_range
    if softplus:
        dt = rnd(batch, length, heads, scale=0.5) - 2.0
    else:
        dt = 0.02 + 0.18 * torch.rand(batch, length, heads, generator=gen, dtype=torch.float64)
    out = dict(x=rnd(batch, length, heads, headdim), dt=dt,
               A=-(lo + (hi - lo) * torch.rand(heads, generator=gen, dtype=torch.float64)),
               B=rnd(batch, length, groups, dstate), C=rnd(batch, length, groups, dstate))
    if D == 'H':
        out['D'] = rnd(heads)
    elif D == 'HP':
        out['D'] = rnd(heads, headdim)
    if z:
        out['z'] = rnd(batch, length, heads, headdim)
    if dt_bias:
        out['dt_bias'] = rnd(heads, scale=0.5)
    if initial_states:
        out['initial_states'] = rnd(batch, heads, headdim, dstate)
    return out


def cast(inputs: Dict[str, torch.Tensor], dtype: torch.dtype, grad: bool = False,
         activations_only: bool = True) -> Dict[str, torch.Tensor]:
    """Copies as leaves; with ``activations_only`` only x, B, C, z (and dt) change dtype, as in a
    model whose parameters A, D, dt_bias stay float32."""
    out = {}
    for name, t in inputs.items():
        to = dtype
        if activations_only and name in ('A', 'D', 'dt_bias', 'initial_states') and \
                dtype in (torch.float16, torch.bfloat16):
            to = torch.float32
        out[name] = t.detach().to(to).requires_grad_(grad)
    return out


def weighted_sum(outputs, weights) -> torch.Tensor:
    """A scalar that depends on every output element (random weights, so no symmetry hides bugs)."""
    return sum((o.double() * w).sum() for o, w in zip(outputs, weights))
