"""What one call of the chunked SSD scan is given (:class:`ScanInputs`, the one container
between the op in ``api.py`` and the stages of both backends), and the dt preprocessing."""
import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class ScanInputs:
    """Every input of one call of the chunked scan: one tensor per field holding the K scan
    directions stacked along its first dimension, and the options they share.

    Args:
        x (Tensor): (K, B, L, H, P).
        dt (Tensor): (K, B, L, H) before ``dt_bias`` / softplus / clamp.
        A (Tensor): (K, H).
        B (Tensor): (K, B, L, G, N).
        C (Tensor): (K, B, L, G, N).
        D (Tensor | None): (K, H) or (K, H, P); None where absent.
        z (Tensor | None): (K, B, L, H, P); None where absent.
        dt_bias (Tensor | None): (K, H); None where absent.
        initial_states (Tensor | None): (K, B, H, P, N); None where absent.
        reverse (tuple[bool]): per direction, scan from the last token to the first.
        chunk_size (int): chunk length (see ``api.ssd_scan``).
        dt_softplus (bool): softplus on dt + dt_bias.
        dt_limit (tuple[float, float]): clamp of dt' (none for (0, inf)).
        return_final_states (bool): also return the final states.

    Any of the tensors may be an expanded view (stride 0 along K, e.g. one dt shared by every
    direction); the backends read it through its strides.
    """

    x: Tensor
    dt: Tensor
    A: Tensor
    B: Tensor
    C: Tensor
    D: Optional[Tensor]
    z: Optional[Tensor]
    dt_bias: Optional[Tensor]
    initial_states: Optional[Tensor]
    reverse: Tuple[bool, ...]
    chunk_size: int
    dt_softplus: bool
    dt_limit: Tuple[float, float]
    return_final_states: bool

    TENSORS = ('x', 'dt', 'A', 'B', 'C', 'D', 'z', 'dt_bias', 'initial_states')

    @property
    def clamps_dt(self) -> bool:
        return clamps(self.dt_limit)

    def present(self) -> List[Tensor]:
        """The tensors that are not None, in :attr:`TENSORS` order (the inputs that get a
        gradient)."""
        return [t for t in (getattr(self, name) for name in self.TENSORS) if t is not None]

    def per_direction(self, name: str) -> Sequence[Optional[Tensor]]:
        """Field ``name`` as K per-direction views (K times None for an absent one)."""
        return unstack(getattr(self, name), len(self.reverse))


def unstack(t: Optional[Tensor], directions: int) -> Sequence[Optional[Tensor]]:
    """A (K, ...) stack as its K views along the first dimension, or K times None."""
    return (None, ) * directions if t is None else t.unbind(0)


def clamps(dt_limit: Tuple[float, float]) -> bool:
    """Whether ``dt_limit`` clamps at all (the default (0, inf) does not)."""
    return float(dt_limit[0]) != 0.0 or not math.isinf(float(dt_limit[1]))


def compute_dtype(x: Tensor) -> torch.dtype:
    """float32 accumulation for fp32 / fp16 / bf16 inputs; float64 inputs stay float64."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def preprocess_dt(dt: Tensor, dt_bias: Optional[Tensor], dt_softplus: bool,
                  dt_limit: Tuple[float, float],
                  dtype: torch.dtype = torch.float32) -> Tensor:
    """dt' = clamp(softplus?(dt + dt_bias), *dt_limit) in ``dtype``; dt (B, L, H)."""
    dt = dt.to(dtype)
    if dt_bias is not None:
        dt = dt + dt_bias.to(dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    if clamps(dt_limit):
        dt = dt.clamp(min=float(dt_limit[0]), max=float(dt_limit[1]))
    return dt


def preprocess_dt_backward(ddt: Tensor, dt: Tensor, dt_bias: Optional[Tensor],
                           options: ScanInputs) -> Tensor:
    """dL/d(dt) from dL/d(dt') (both (B, L, H)), undoing :func:`preprocess_dt` (recomputed)."""
    if not (options.dt_softplus or options.clamps_dt):
        return ddt
    v = dt.to(ddt.dtype)
    if dt_bias is not None:
        v = v + dt_bias.to(ddt.dtype)
    if options.dt_softplus:
        # softplus' = sigmoid, 1 above torch's threshold 20 (where softplus is the identity)
        ddt = ddt * torch.where(v > 20.0, 1.0, torch.sigmoid(v))
        v = F.softplus(v)
    if options.clamps_dt:
        lo, hi = options.dt_limit
        ddt = ddt * ((v >= lo) & (v <= hi))
    return ddt
