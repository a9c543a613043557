"""What one call of the chunked SSD scan is given: per-direction tensors and shared options.

Both implementations (the PyTorch path in ``chunk.py`` and the Triton path in ``triton_chunk.py``)
receive a :class:`ScanOptions` and one :class:`DirectionInputs` per scan direction, and hand their
autograd Function the tensors in :attr:`DirectionInputs.FIELDS` order (an autograd Function only
tracks tensors passed as its own arguments), so gradients come back under the same names.
"""
import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class ScanOptions:
    """Options shared by every direction of one call.

    Args:
        chunk_size (int): longest chunk; the result does not depend on it.
        dt_softplus (bool): softplus on dt + dt_bias.
        dt_limit (tuple[float, float]): clamp of dt' (none for (0, inf)).
        reverse (tuple[bool, ...]): per direction, scan from the last token to the first.
        return_final_states (bool): also return each direction's final state.
    """

    chunk_size: int
    dt_softplus: bool
    dt_limit: Tuple[float, float]
    reverse: Tuple[bool, ...]
    return_final_states: bool = False

    @property
    def clamps_dt(self) -> bool:
        """Whether ``dt_limit`` clamps at all (the default (0, inf) does not)."""
        lo, hi = self.dt_limit
        return lo != 0.0 or not math.isinf(hi)


@dataclasses.dataclass
class DirectionInputs:
    """Tensors of one scan direction, shapes as in ``api.ssd_scan``.

    Args:
        x (Tensor): (B, L, H, P).
        dt (Tensor): (B, L, H) before ``dt_bias`` / softplus / clamp.
        A (Tensor): (H,).
        B (Tensor): (B, L, G, N).
        C (Tensor): (B, L, G, N).
        D (Tensor, optional): (H,) or (H, P). Defaults to None.
        z (Tensor, optional): (B, L, H, P) gate. Defaults to None.
        dt_bias (Tensor, optional): (H,). Defaults to None.
        initial_states (Tensor, optional): (B, H, P, N). Defaults to None.
    """

    x: Tensor
    dt: Tensor
    A: Tensor
    B: Tensor
    C: Tensor
    D: Optional[Tensor] = None
    z: Optional[Tensor] = None
    dt_bias: Optional[Tensor] = None
    initial_states: Optional[Tensor] = None

    FIELDS = ('x', 'dt', 'A', 'B', 'C', 'D', 'z', 'dt_bias', 'initial_states')

    def tensors(self) -> Tuple[Optional[Tensor], ...]:
        """The fields in :attr:`FIELDS` order."""
        return tuple(getattr(self, name) for name in self.FIELDS)

    @classmethod
    def unflatten(cls, flat: Sequence[Optional[Tensor]]) -> List['DirectionInputs']:
        """Inverse of concatenating :meth:`tensors` of several directions."""
        n = len(cls.FIELDS)
        return [cls(*flat[i:i + n]) for i in range(0, len(flat), n)]


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
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    if lo != 0.0 or not math.isinf(hi):
        dt = dt.clamp(min=lo, max=hi)
    return dt


def preprocess_dt_backward(ddt: Tensor, dt: Tensor, dt_bias: Optional[Tensor],
                           options: ScanOptions) -> Tensor:
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
