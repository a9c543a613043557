"""What one call of the chunked SSD scan is given (:class:`ScanInputs`, the one container
between the op in ``api.py`` and the stages of both backends), and the dt preprocessing."""
import dataclasses
import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class ScanInputs:
    """Every input of one call of the chunked scan: the tensors of each scan direction (tuples
    with one entry per direction, shapes as in ``api.ssd_scan``) and the options they share.

    Args:
        x, dt, A, B, C (tuple[Tensor]): (B, L, H, P), (B, L, H) before ``dt_bias`` / softplus /
            clamp, (H,), (B, L, G, N), (B, L, G, N).
        D, z, dt_bias, initial_states (tuple[Tensor | None]): (H,) or (H, P), (B, L, H, P),
            (H,), (B, H, P, N); None where absent (all directions alike).
        reverse (tuple[bool]): scan from the last token to the first.
        chunk_size (int): chunk length (see ``api.ssd_scan``).
        dt_softplus (bool): softplus on dt + dt_bias.
        dt_limit (tuple[float, float]): clamp of dt' (none for (0, inf)).
        return_final_states (bool): also return the final state (one direction only).
    """

    x: Tuple[Tensor, ...]
    dt: Tuple[Tensor, ...]
    A: Tuple[Tensor, ...]
    B: Tuple[Tensor, ...]
    C: Tuple[Tensor, ...]
    D: Tuple[Optional[Tensor], ...]
    z: Tuple[Optional[Tensor], ...]
    dt_bias: Tuple[Optional[Tensor], ...]
    initial_states: Tuple[Optional[Tensor], ...]
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
        """The tensors that are not None, field by field in :attr:`TENSORS` order (the inputs
        that get a gradient)."""
        return [t for name in self.TENSORS for t in getattr(self, name) if t is not None]


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
