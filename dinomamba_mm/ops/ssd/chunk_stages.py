"""The stages of the chunked SSD scan in PyTorch, each forward and backward (the CPU path).

The stages and their intermediates carry the names of ``triton_chunk.py`` and ``reference.py``
(and of mamba_ssm's ops). Per scan direction, batch row b and head h; tokens cut into chunks of Q:

  dA_cumsum     s_i = sum of dt'_k A over the chunk's tokens up to i, in scan order
  chunk_state   S_c = sum_j exp(s_exit - s_j) dt'_j x_j B_j^T        (exit: the chunk's last token)
  state_passing H_c entering chunk c: H_first = initial state, H_next(c) = exp(s_exit(c)) H_c + S_c
  chunk_scan    y_i = sum_{j<=i} exp(s_i - s_j) (C_i . B_j) dt'_j x_j           (diagonal block)
                      + exp(s_i) C_i H_c                                       (off-diagonal)
                      + D x_i, then * silu(z_i)                                (output)

Here (CPU) the state stages run chunk by chunk in one loop, ``state_passing_fwd`` / ``_bwd``,
which calls ``chunk_state_*`` and the off-diagonal part of the chunk scan (``chunk_scan_off_*``)
for each chunk while its buffers are in cache; the diagonal blocks (``chunk_scan_diag_*``) run for
all chunks at once, before (forward) or after (backward) the loop, and ``chunk_scan_out_*`` is
the output's D x and gate. The Triton path runs each stage over all chunks in its own kernels:

  here                               triton_chunk.py
  dA_cumsum_fwd / _bwd               dA_cumsum_fwd / _bwd
  chunk_scan_diag_fwd, _off_fwd,     chunk_scan_fwd (one kernel)
  _out_fwd
  chunk_state_fwd                    chunk_state_fwd
  state_passing_fwd (the loop)       state_passing_fwd
  chunk_scan_out_bwd, _off_bwd       chunk_scan_bwd_dstates
  state_passing_bwd (the loop)       state_passing_bwd
  chunk_scan_diag_bwd,               chunk_scan_chunk_state_bwd (dx and dB / dC kernels)
  chunk_state_bwd

The K directions of a call (stacked along the first dimension of every input) go through every
stage together as R = K * B rows (reverse rows differ in their running sums and masks only;
nothing is flipped). Layouts (Hg = H // G, Lp = n_c Q):

  dt, decays          (R, H, Lp)        dA_cumsum (R, H, n_c, Q) float64, ddA_cumsum, ddA
  x_dt (= dt' x), y   (R, H, Lp, P) head-major; viewed per group as (R, G, Lp, Hg, P)
  B, C                (R, G, Lp, N)     CB                           (R, G, n_c, Q, Q), causal
  states              (R, G, n_c, N, Hg, P), N-major, so that every product reads row-major operands

Each direction's padding sits at the start of its scan (the front of the sequence forward, the end
in reverse), where dt' = 0 and x = 0 leave the entering state as it is.

The decay gradient is summed without cancellation (float32 keeps its digits under strong decay):
step k enters the exponent s_i - s_j of the pairs j < k <= i (in scan order), so
ddA_k = dL/d(dt'_k A) takes the gradients of the diagonal blocks' exponents summed over that
rectangle (:func:`rectangle_sums_`), and the exclusive running sum of the chunk state's terms; only
the terms in s_i of the off-diagonal part and of the chunk's decay go through ddA_cumsum = dL/ds.
Summing rows minus columns of the same matrices and then running sums over k (the textbook
identity) cancels the diagonal and most other terms and loses about Q times more digits.

CPU cost is mostly memory traffic, hence: decay exponents are clamped at ``MIN_EXPONENT`` (no exp
underflows, no denormal enters a product); masks for the diagonal blocks exist for a block of heads
at a time (the backward pass makes them again); chunk-sized buffers are reused along the loop;
products that are only summed go through one reused buffer (a fresh large buffer costs page faults
when first written).
"""
import dataclasses
import math
import warnings
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .scan_inputs import (ScanInputs, compute_dtype, preprocess_dt, preprocess_dt_backward,
                          unstack)

Tensor = torch.Tensor

#: exp() of these is a normal number (float32: 8.8e-27, float64: 2.7e-261): a smaller decay is
#: negligible in every sum it enters, and x86 CPUs compute exp of an underflowing exponent and
#: products with denormals on a microcode path ~10-90x slower.
MIN_EXPONENT = {torch.float32: -60.0, torch.float64: -600.0}
#: float32 differences of running sums above this lose more than 3e-5 (relative) to rounding:
#: the masks then split s into a float32 head and tail (see :func:`decay_mask`).
EXACT_CUMSUM = 512.0
_GROWTH_WARNED = False  # see dA_cumsum_fwd
#: the (Q, Q) matrices of the diagonal blocks are built for a block of heads this big at a time.
MASK_BLOCK_BYTES = 4 * 2**20
#: products that are only summed go through one buffer of at least this size (and one row).
PRODUCT_BUFFER_BYTES = 4 * 2**20


def chunk_layout(length: int, chunk_size: int) -> Tuple[int, int]:
    """(n_chunks, chunk length Q): chunks of at most ``chunk_size`` tokens, padding < n_chunks
    (length >= 1; integer arithmetic, so that symbolic sizes work too)."""
    n_chunks = -(-length // chunk_size)
    return n_chunks, -(-length // n_chunks)


@dataclasses.dataclass(frozen=True)
class Direction:
    """One direction's part of the stacked layout.

    Args:
        rows (slice): its R rows.
        reverse (bool): scans from the last token to the first.
        tokens (slice): where its L tokens sit on the padded axis (the padding is at the scan's
            start).
        chunks (tuple[int]): chunk indices in scan order.
        exit (int): index inside a chunk of its last token in scan order (Q - 1, or 0 reverse).
    """

    rows: slice
    reverse: bool
    tokens: slice
    chunks: Tuple[int, ...]
    exit: int


class ChunkLayout:
    """Sizes, the stacked rows of every direction and views of the stacked tensors."""

    def __init__(self, x: Tensor, B: Tensor, reverse: Sequence[bool], chunk_size: int):
        """x (K, B, L, H, P) and B (K, B, L, G, N) give the sizes."""
        _, self.batch, self.length, self.heads, self.headdim = x.shape
        self.groups, self.dstate = B.shape[3], B.shape[4]
        self.per_group = self.heads // self.groups
        self.dtype = compute_dtype(x)
        self.device = x.device
        self.rows = self.batch * len(reverse)
        self.n_chunks, self.q = chunk_layout(self.length, chunk_size)
        self.padded = self.n_chunks * self.q
        pad = self.padded - self.length
        forward, backward = tuple(range(self.n_chunks)), tuple(range(self.n_chunks - 1, -1, -1))
        self.directions = [
            Direction(rows=slice(d * self.batch, (d + 1) * self.batch), reverse=rev,
                      tokens=slice(0, self.length) if rev else slice(pad, self.padded),
                      chunks=backward if rev else forward, exit=0 if rev else self.q - 1)
            for d, rev in enumerate(reverse)]
        self._products: Optional[Tensor] = None

    def new(self, *shape: int) -> Tensor:
        """Uninitialised buffer in the compute dtype."""
        return torch.empty(*shape, dtype=self.dtype, device=self.device)

    def products(self, numel: int) -> Tensor:
        """A flat buffer of at least ``numel`` elements, the same one on every call (for
        products that are only summed: a fresh large buffer costs page faults first)."""
        if self._products is None or self._products.numel() < numel:
            per_element = torch.finfo(self.dtype).bits // 8
            self._products = self.new(max(numel, PRODUCT_BUFFER_BYTES // per_element))
        return self._products

    def zeros(self, *shape: int) -> Tensor:
        return torch.zeros(*shape, dtype=self.dtype, device=self.device)

    def stack_tokens(self, tensors: Sequence[Tensor]) -> Tensor:
        """Per direction (B, L, M, ...) (a (K, B, L, M, ...) tensor or K tensors) ->
        (R, M, Lp, ...) in the compute dtype, zeros on the padding."""
        out = None
        for d, t in zip(self.directions, tensors):
            if out is None:
                out = self.new(self.rows, t.shape[2], self.padded, *t.shape[3:])
            self.zero_padding(out[d.rows], d, dim=2)
            out[d.rows, :, d.tokens] = t.transpose(1, 2)
        return out

    def unstack_tokens(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        """(R, M, Lp, ...) -> (K, B, L, M, ...) in ``dtype``: each direction's tokens, the
        inverse of :meth:`stack_tokens`."""
        out = torch.empty(len(self.directions), self.batch, self.length, t.shape[1],
                          *t.shape[3:], dtype=dtype, device=self.device)
        for d, out_d in zip(self.directions, out):
            out_d.copy_(t[d.rows, :, d.tokens].transpose(1, 2))
        return out

    def zero_padding(self, t: Tensor, direction: Direction, dim: int) -> None:
        """Zero the padded positions of ``direction`` along the padded axis ``dim`` of t."""
        if self.padded == self.length:
            return
        if direction.reverse:
            t.narrow(dim, self.length, self.padded - self.length).zero_()
        else:
            t.narrow(dim, 0, self.padded - self.length).zero_()

    def chunk(self, c: int) -> slice:
        return slice(c * self.q, (c + 1) * self.q)

    def group_token(self, t: Tensor) -> Tensor:
        """Head-major (R', H, Lp, ...) -> (R', G, Lp, Hg, ...) view."""
        return t.unflatten(1, (self.groups, self.per_group)).transpose(2, 3)

    def state_to_n_major(self, h: Tensor) -> Tensor:
        """(B, H, P, N) -> (B, G, N, Hg, P) copy in the compute dtype."""
        h = h.to(self.dtype).reshape(h.shape[0], self.groups, self.per_group, self.headdim,
                                     self.dstate)
        return h.permute(0, 1, 4, 2, 3).contiguous()

    def state_from_n_major(self, h: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """(B, G, N, Hg, P) -> (B, H, P, N) copy (into ``out`` if given)."""
        h = h.permute(0, 1, 3, 4, 2)
        if out is None:
            return h.reshape(h.shape[0], self.heads, self.headdim, self.dstate)
        out.view(h.shape).copy_(h)
        return out

    def exit_values(self, t: Tensor) -> Tensor:
        """(R, H, n_c, Q) -> (R, H, n_c): the values at each chunk's exit."""
        return torch.cat([t[d.rows, ..., d.exit] for d in self.directions])


class Decays(NamedTuple):
    """exp of the running sums s, clamped at ``MIN_EXPONENT``, in the compute dtype.

    Attributes:
        to_exit: exp(s_exit - s_j) (R, H, Lp), a token's decay up to its chunk's exit.
        from_entry: exp(s_i) (R, H, Lp), the decay from the chunk's entry to token i.
        chunk: exp(s_exit) (R, H, n_c), the decay across a whole chunk.
    """

    to_exit: Tensor
    from_entry: Tensor
    chunk: Tensor


def _exp(exponent: Tensor, dtype: torch.dtype) -> Tensor:
    """exp(exponent) in ``dtype``, exponents clamped at ``MIN_EXPONENT``."""
    return exponent.clamp(min=MIN_EXPONENT[dtype]).to(dtype).exp_()


def chunk_decays(lay: ChunkLayout, dA_cumsum: Tensor) -> Decays:
    """The :class:`Decays` of s = dA_cumsum (R, H, n_c, Q) float64."""
    exit_cumsum = lay.exit_values(dA_cumsum)
    shape = (lay.rows, lay.heads, lay.padded)
    return Decays(_exp(exit_cumsum.unsqueeze(-1) - dA_cumsum, lay.dtype).view(shape),
                  _exp(dA_cumsum, lay.dtype).view(shape), _exp(exit_cumsum, lay.dtype))


def summed_products(lay: ChunkLayout, a: Tensor, b: Tensor, dims: Tuple[int, ...]) -> Tensor:
    """(a * b) summed over ``dims`` of each a[i] (dims of a[i], so not counting dim 0), stacked
    over i. The products go through :meth:`ChunkLayout.products`, as many i at a time as fit."""
    kept = [n for k, n in enumerate(a.shape[1:]) if k not in {k % (a.dim() - 1) for k in dims}]
    per_row = a[0].numel() if a.shape[0] else 0
    buffer = lay.products(per_row)
    step = max(1, buffer.numel() // max(per_row, 1))
    dims = tuple(k + 1 if k >= 0 else k for k in dims)
    sums = [lay.zeros(0, *kept)]
    for i in range(0, a.shape[0], step):
        n = min(step, a.shape[0] - i)
        product = buffer[:n * per_row].view(n, *a.shape[1:])
        sums.append(torch.mul(a[i:i + n], b[i:i + n], out=product).sum(dims))
    return torch.cat(sums)


def _running_sum(t: Tensor, reverse: bool) -> Tensor:
    """Inclusive prefix sums along the last dim, or suffix sums when ``reverse``."""
    if reverse:
        return t.flip(-1).cumsum(-1).flip(-1)
    return t.cumsum(-1)


# ------------------------------------------------------------------------------ dA_cumsum
class DtCumsum(NamedTuple):
    """Output of :func:`dA_cumsum_fwd`.

    Attributes:
        dt: dt' (R, H, Lp) in the compute dtype, 0 on the padding.
        dA_cumsum: s (R, H, n_c, Q) float64 (differences of float32 running sums lose digits).
        monotone: every dt' A is <= 0 (a finite, non-growing scan): the masks can then skip
            zeroing their non-causal side before the exp (see :func:`decay_mask`).
        finite: every dt' is finite.
        split: the masks split s into a float32 head and tail (|s| > ``EXACT_CUMSUM`` in
            float32; see :func:`decay_mask`).
    """

    dt: Tensor
    dA_cumsum: Tensor
    monotone: bool
    finite: bool
    split: bool


def dA_cumsum_fwd(lay: ChunkLayout, inp: ScanInputs) -> DtCumsum:
    """dt' = clamp(softplus?(dt + dt_bias)) and its running sums s of dt' A per chunk."""
    dt = lay.stack_tokens([preprocess_dt(dt, bias, inp.dt_softplus, inp.dt_limit, lay.dtype)
                           for dt, bias in zip(inp.dt, inp.per_direction('dt_bias'))])
    A = inp.A.to(torch.float64).unsqueeze(1).expand(-1, lay.batch, -1)  # (K, B, H)
    A = A.reshape(lay.rows, lay.heads)
    dA = (dt.double() * A.unsqueeze(-1)).view(lay.rows, lay.heads, lay.n_chunks, lay.q)
    dA_cumsum = torch.cat([_running_sum(dA[d.rows], d.reverse) for d in lay.directions])
    if dA.numel() == 0:
        return DtCumsum(dt, dA_cumsum, monotone=True, finite=True, split=False)
    # dt' A is NaN or infinite wherever dt' is (even for A = 0: 0 * inf is NaN)
    lowest, highest = torch.aminmax(dA)
    lowest, highest = lowest.item(), highest.item()
    global _GROWTH_WARNED
    if highest > 0 and not _GROWTH_WARNED:
        _GROWTH_WARNED = True
        warnings.warn(f"SSD scan: dt' A > 0 at some step (up to {highest:.3g}; A > 0, or dt' < 0 "
                      'without softplus): the state grows by exp(dt\' A) per step instead of '
                      'decaying, and overflows to inf / NaN once the growth summed over the '
                      'sequence passes ~88 (float32). Warned once.')
    split = lay.dtype != torch.float64 and bool(dA_cumsum.abs().max() > EXACT_CUMSUM)
    return DtCumsum(dt, dA_cumsum, monotone=highest <= 0,  # False for NaN
                    finite=math.isfinite(lowest) and math.isfinite(highest), split=split)


def dA_cumsum_bwd(lay: ChunkLayout, ddA: Tensor, ddA_cumsum: Tensor, ddt: Tensor, dt: Tensor,
                  inp: ScanInputs) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """d dt (K, B, L, H), dA (K, H) and d dt_bias (K, H) or None.

    Args:
        lay (ChunkLayout): The layout.
        ddA (Tensor): dL/d(dt' A) (R, H, n_c, Q) that the other stages computed directly.
        ddA_cumsum (Tensor): dL/ds (R, H, n_c, Q) of the other stages' terms in s.
        ddt (Tensor): dL/d(dt') (R, H, Lp) through the explicit dt' factors of the other
            stages.
        dt (Tensor): dt' (R, H, Lp) of the forward pass.
        inp (ScanInputs): The op's inputs.
    """
    # s = running sums of dt' A, so dL/d(dt' A) = the running sums of dL/ds the other way round
    ddA = ddA + torch.cat([_running_sum(ddA_cumsum[d.rows], not d.reverse)
                           for d in lay.directions])
    ddA = ddA.view(lay.rows, lay.heads, lay.padded)
    d_dts, dAs, d_biases = [], [], []
    for d, A, dt_raw, bias in zip(lay.directions, inp.A, inp.dt, inp.per_direction('dt_bias')):
        dAs.append(torch.linalg.vecdot(ddA[d.rows].double(), dt[d.rows].double()).sum(0))
        ddt_d = ddt[d.rows].addcmul(ddA[d.rows], A.to(lay.dtype)[:, None])
        ddt_raw = preprocess_dt_backward(ddt_d[:, :, d.tokens].transpose(1, 2), dt_raw, bias,
                                         inp)
        d_biases.append(ddt_raw.sum((0, 1)) if bias is not None else None)
        d_dts.append(ddt_raw)
    d_bias = torch.stack(d_biases).to(inp.dt_bias.dtype) if inp.dt_bias is not None else None
    return torch.stack(d_dts).to(inp.dt.dtype), torch.stack(dAs).to(inp.A.dtype), d_bias


def dt_scaled_x(lay: ChunkLayout, inp: ScanInputs, cum: DtCumsum) -> Tensor:
    """x_dt = dt' x, head-major (R, H, Lp, P), 0 on the padding: the operand of both
    :func:`chunk_state_fwd` and :func:`chunk_scan_diag_fwd`.

    Where dt' is not finite x_dt is 0: the running sums already carry the NaN / inf to every
    later token (as the sequential recurrence does), and a NaN in x_dt would reach the earlier
    tokens of its chunk through the zeros of the diagonal blocks' products.
    """
    x_dt = lay.new(lay.rows, lay.heads, lay.padded, lay.headdim)
    for x, d in zip(inp.x, lay.directions):
        lay.zero_padding(x_dt[d.rows], d, dim=2)
        torch.mul(x, cum.dt[d.rows, :, d.tokens].transpose(1, 2).unsqueeze(-1),
                  out=x_dt[d.rows, :, d.tokens].transpose(1, 2))
    if not cum.finite:
        x_dt.masked_fill_(~torch.isfinite(cum.dt).unsqueeze(-1), 0.0)
    return x_dt


def dt_scaled_x_bwd(lay: ChunkLayout, d_x_dt: Tensor, dy: Tensor, ddt: Tensor, dt: Tensor,
                    inp: ScanInputs) -> Tensor:
    """dx (K, B, L, H, P) from d(dt' x) and from the skip term D x; adds x . d(dt' x) to
    ``ddt`` (R, H, Lp) in place."""
    dx = lay.new(*inp.x.shape)
    for x, D, dx_d, d in zip(inp.x, inp.per_direction('D'), dx, lay.directions):
        d_x_dt_d = d_x_dt[d.rows, :, d.tokens].transpose(1, 2)
        ddt[d.rows, :, d.tokens] += summed_products(lay, x, d_x_dt_d, (-1,)).transpose(1, 2)
        torch.mul(d_x_dt_d, dt[d.rows, :, d.tokens].transpose(1, 2).unsqueeze(-1), out=dx_d)
        if D is not None:
            dx_d.addcmul_(dy[d.rows, :, d.tokens].transpose(1, 2), _skip_weight(D, lay.dtype))
    return dx.to(inp.x.dtype)


def _skip_weight(D: Tensor, dtype: torch.dtype) -> Tensor:
    """D (H,) or (H, P) as a factor of (B, L, H, P) tensors."""
    D = D.to(dtype)
    return D[:, None] if D.dim() == 1 else D


# ------------------------------------------------------------------------------ chunk_state
def _token_matrices(lay: ChunkLayout, t: Tensor) -> Tensor:
    """Contiguous (B, G, Q, Hg, P) -> (B G, Q, Hg P) view."""
    return t.view(-1, lay.q, lay.per_group * lay.headdim)


def _state_matrices(lay: ChunkLayout, t: Tensor) -> Tensor:
    """(B, G, N, Hg, P) -> (B G, N, Hg P) view."""
    return t.view(-1, lay.dstate, lay.per_group * lay.headdim)


class DirectionViews:
    """One direction's rows of the stacked tensors as the state stages read them, made once per
    loop so that a chunk is a slice: token tensors per group (B, G, Lp, Hg, ...), B, C and their
    gradients as (B G, n_c, Q, N).

    Args:
        lay (ChunkLayout): the layout.
        d (Direction): the direction.
        x_dt (Tensor): The stacked x dt' of the forward pass.
        B (Tensor): The stacked B of the forward pass.
        C (Tensor): The stacked C of the forward pass.
        decays (Decays): their decays.
        **grads (Tensor): stacked gradients dy, d_x_dt, dB, dC and the (R, G, Lp, Hg) sums
            state_terms, out_terms of the backward pass.
    """

    def __init__(self, lay: ChunkLayout, d: Direction, x_dt: Tensor, B: Tensor, C: Tensor,
                 decays: Decays, **grads: Tensor):
        rows = d.rows

        def per_group(t: Tensor) -> Tensor:
            return lay.group_token(t)[rows]

        def matrices(t: Tensor) -> Tensor:  # (R, G, Lp, N) -> (B G, n_c, Q, N)
            return t[rows].view(-1, lay.n_chunks, lay.q, lay.dstate)

        self.x_dt = per_group(x_dt)
        self.to_exit = per_group(decays.to_exit.unsqueeze(-1))
        self.from_entry = per_group(decays.from_entry.unsqueeze(-1))
        self.decay = per_group(decays.chunk)[:, :, :, None, :, None]  # scales N-major states
        self.B, self.C = matrices(B), matrices(C)
        if grads:
            self.dy, self.d_x_dt = per_group(grads['dy']), per_group(grads['d_x_dt'])
            self.dB, self.dC = matrices(grads['dB']), matrices(grads['dC'])
            self.state_terms = grads['state_terms'][rows]
            self.out_terms = grads['out_terms'][rows]


def chunk_state_fwd(lay: ChunkLayout, v: DirectionViews, c: int, weighted: Tensor,
                    out: Tensor) -> Tensor:
    """S_c = sum_j exp(s_exit - s_j) dt'_j x_j B_j^T of chunk c into ``out`` (B, G, N, Hg, P);
    ``weighted`` (B, G, Q, Hg, P) receives exp(s_exit - s_j) dt'_j x_j."""
    tokens = lay.chunk(c)
    torch.mul(v.x_dt[:, :, tokens], v.to_exit[:, :, tokens], out=weighted)
    torch.bmm(v.B[:, c].transpose(1, 2), _token_matrices(lay, weighted),
              out=_state_matrices(lay, out))
    return out


def chunk_state_bwd(lay: ChunkLayout, v: DirectionViews, c: int, dS: Tensor, weighted: Tensor,
                    d_weighted: Tensor, d_rows: Tensor) -> None:
    """Backward of :func:`chunk_state_fwd` for dS = dL/dS_c (B, G, N, Hg, P), accumulated into the
    gradients of ``v`` (d_x_dt, dB), and T_j = exp(s_exit - s_j) dt'_j x_j^T dS B_j (per head)
    into v.state_terms: step k enters s_exit - s_j for the tokens j before it in scan order,
    so ddA_k += sum_{j before k} T_j (:func:`state_passing_bwd`). ``weighted`` and
    ``d_weighted`` are (B, G, Q, Hg, P) buffers, ``d_rows`` a (B G, Q, N) one."""
    tokens = lay.chunk(c)
    w = v.to_exit[:, :, tokens]
    torch.mul(v.x_dt[:, :, tokens], w, out=weighted)
    dS = _state_matrices(lay, dS)
    v.dB[:, c] += torch.bmm(_token_matrices(lay, weighted), dS.transpose(1, 2), out=d_rows)
    torch.bmm(v.B[:, c], dS, out=_token_matrices(lay, d_weighted))
    v.d_x_dt[:, :, tokens].addcmul_(d_weighted, w)
    torch.sum(d_weighted.mul_(weighted), -1, out=v.state_terms[:, :, tokens])


# ------------------------------------------------------------------------------ state_passing
def state_passing_fwd(lay: ChunkLayout, x_dt: Tensor, B_s: Tensor, C_s: Tensor, decays: Decays,
                      initial_states: Optional[Tensor], y: Optional[Tensor],
                      want_final: bool, want_states: bool = False
                      ) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """The loop over chunks in scan order: adds each chunk's off-diagonal term to y
    (:func:`chunk_scan_off_fwd`) when y is given, then passes the state on,
    H_next = exp(s_exit) H_c + S_c (:func:`chunk_state_fwd`). The zero state entering a first
    chunk adds nothing, and the state leaving the last chunk is only computed as the final state.

    Args:
        initial_states (Tensor | None): (K, B, H, P, N), or None for zeros.

    Returns:
        tuple: The final states (K, B, H, P, N) (None unless ``want_final``); with
        ``want_states`` (the backward pass's recomputation), H_c entering every chunk
        (R, G, n_c, N, Hg, P), else None.
    """
    G, N, Hg, P, q = lay.groups, lay.dstate, lay.per_group, lay.headdim, lay.q
    states = lay.new(lay.rows, G, lay.n_chunks, N, Hg, P) if want_states else None
    tokens = lay.new(lay.batch, G, q, Hg, P)  # one chunk's weighted x_dt, or its C H
    h, spare = lay.new(lay.batch, G, N, Hg, P), lay.new(lay.batch, G, N, Hg, P)
    finals = lay.new(len(lay.directions), lay.batch, lay.heads, P, N) if want_final else None
    for k, (d, h0) in enumerate(zip(lay.directions, unstack(initial_states, len(lay.directions)))):
        is_zero = h0 is None
        if is_zero:
            h.zero_()
        else:
            h.copy_(lay.state_to_n_major(h0))
        v = DirectionViews(lay, d, x_dt, B_s, C_s, decays)
        for i, c in enumerate(d.chunks):
            if want_states:
                states[d.rows, :, c] = h
            if y is not None and not is_zero:
                chunk_scan_off_fwd(lay, v, c, h, lay.group_token(y)[d.rows], tokens)
            if i < lay.n_chunks - 1 or want_final:
                h_next = chunk_state_fwd(lay, v, c, tokens, spare)
                h, spare, is_zero = h_next.addcmul_(v.decay[:, :, c], h), h, False
        if want_final:
            lay.state_from_n_major(h, out=finals[k])
    return finals, states



def state_passing_bwd(lay: ChunkLayout, states: Tensor, decays: Decays,
                      x_dt: Tensor, B_s: Tensor, C_s: Tensor,
                      d_final: Optional[Tensor], has_initial: bool,
                      grads: 'ScanGrads') -> Optional[Tensor]:
    """The loop over chunks in reverse scan order, with g = dL/d(the state leaving chunk c):
    :func:`chunk_state_bwd` for dS_c = g, dL/ds_exit += exp(s_exit) <g, H_c>, then g = chunk c's
    share of dL/dH_c (:func:`chunk_scan_off_bwd`, with C_i H_c recomputed from ``states``, H_c
    (R, G, n_c, N, Hg, P)) + exp(s_exit) g. Adds the decay terms to grads.ddA_cumsum and
    grads.ddA. ``d_final``: dL/d(final states) (K, B, H, P, N), or None.

    Returns:
        Tensor | None: dL/d(initial states) (K, B, H, P, N) if ``has_initial``, else None.
    """
    G, N, Hg, P, q, nc = lay.groups, lay.dstate, lay.per_group, lay.headdim, lay.q, lay.n_chunks
    per_token = (lay.rows, G, lay.padded, Hg)
    fields = dict(dy=grads.dy, d_x_dt=grads.d_x_dt, dB=grads.dB, dC=grads.dC,
                  state_terms=lay.zeros(*per_token), out_terms=lay.zeros(*per_token))
    d_exit = lay.zeros(lay.rows, G, nc, Hg)
    tokens, d_tokens = lay.new(lay.batch, G, q, Hg, P), lay.new(lay.batch, G, q, Hg, P)
    C_states = lay.new(lay.batch, G, q, Hg, P)
    d_rows = lay.new(lay.batch * G, q, N)
    g_buffer, spare = lay.new(lay.batch, G, N, Hg, P), lay.new(lay.batch, G, N, Hg, P)
    d_initial = lay.new(len(lay.directions), lay.batch, lay.heads, P, N) if has_initial else None
    for k, (d, d_final_d) in enumerate(zip(lay.directions, unstack(d_final, len(lay.directions)))):
        v = DirectionViews(lay, d, x_dt, B_s, C_s, decays, **fields)
        states_d, d_exit_d = states[d.rows], d_exit[d.rows]
        g = None if d_final_d is None else g_buffer.copy_(lay.state_to_n_major(d_final_d))
        for c in reversed(d.chunks):
            first = c == d.chunks[0]
            if g is not None:
                chunk_state_bwd(lay, v, c, g, tokens, d_tokens, d_rows)
                if has_initial or not first:
                    torch.sum(torch.mul(g, states_d[:, :, c], out=spare), (2, 4),
                              out=d_exit_d[:, :, c])
            if first and not has_initial:
                break  # the zero state entering the first chunk needs no gradient
            h = states_d[:, :, c]
            torch.bmm(v.C[:, c], _state_matrices(lay, h), out=_token_matrices(lay, C_states))
            local = chunk_scan_off_bwd(lay, v, c, h, C_states, tokens, d_rows, spare)
            if g is not None:
                local.addcmul_(v.decay[:, :, c], g)
            g_buffer, spare, g = local, g_buffer, local
        if has_initial:
            lay.state_from_n_major(g, out=d_initial[k])

    def per_head(t: Tensor, *shape: int) -> Tensor:  # (R, G, ..., Hg) -> (R, H, ...)
        return t.transpose(2, 3).reshape(lay.rows, lay.heads, *shape)

    grads.ddA_cumsum.add_(per_head(fields['out_terms'], nc, q))
    ends = per_head(d_exit, nc) * decays.chunk
    terms = per_head(fields['state_terms'], nc, q)  # the chunk state's T: exclusive running sums
    for d in lay.directions:
        grads.ddA_cumsum[d.rows, ..., d.exit] += ends[d.rows]
        if d.reverse:  # the tokens before k in scan order are those after it
            grads.ddA[d.rows, ..., :-1] += _running_sum(terms[d.rows], reverse=True)[..., 1:]
        else:
            grads.ddA[d.rows, ..., 1:] += terms[d.rows].cumsum(-1)[..., :-1]
    return d_initial


# ------------------------------------------------------------------------------ chunk_scan
def _causal_(t: Tensor, reverse: bool) -> Tensor:
    """Zero the non-causal side of (..., Q, Q) matrices in place: causal is j <= i forward,
    j >= i reverse."""
    return t.triu_() if reverse else t.tril_()


def decay_mask(dA_cumsum: Tensor, reverse: bool, monotone: bool, split: bool,
               out: Tensor) -> Tensor:
    """exp(s_i - s_j) (..., n_c, Q, Q) from s (..., n_c, Q) float64, into ``out``. The causal
    entries (j not after i in scan order) are exact; the others are meant to be multiplied by the
    zeros of a causal CB.

    ``monotone`` (every step decays): the non-causal side, s_i - s_j >= 0, is clamped to 0
    instead of being zeroed first (a pass fewer); its exp(0) = 1 meets CB's zeros.
    Otherwise it is zeroed before the exp (so that it cannot overflow) and after it.
    ``split``: s is split into a float32 head and tail; the difference of the heads is exact
    where the mask is not negligible (Sterbenz), so float32 keeps the digits of large |s|.
    Exponents are clamped at ``MIN_EXPONENT``.
    """
    head = dA_cumsum.to(out.dtype)
    torch.sub(head.unsqueeze(-1), head.unsqueeze(-2), out=out)
    if split:
        tail = (dA_cumsum - head.double()).to(out.dtype)
        out.add_(tail.unsqueeze(-1)).sub_(tail.unsqueeze(-2))
    if monotone:
        return out.clamp_(min=MIN_EXPONENT[out.dtype], max=0.0).exp_()
    _causal_(out, reverse).clamp_(min=MIN_EXPONENT[out.dtype]).exp_()
    return _causal_(out, reverse)


def _block_shape(lay: ChunkLayout) -> Tuple[int, int]:
    """(rows, heads) of a block of :func:`head_blocks`: whole heads of one group, as many as fit
    their (Q, Q) matrices for all chunks in ``MASK_BLOCK_BYTES`` (at least one); when all heads
    of a row fit, several rows of one direction (a block is then contiguous in every tensor)."""
    per_head = lay.n_chunks * lay.q * lay.q * torch.finfo(lay.dtype).bits // 8
    heads = max(k for k in range(1, lay.per_group + 1)
                if lay.per_group % k == 0 and (k == 1 or k * per_head <= MASK_BLOCK_BYTES))
    rows = max(1, MASK_BLOCK_BYTES // (lay.heads * per_head)) if heads == lay.heads else 1
    return max(1, min(rows, lay.batch)), heads


def head_blocks(lay: ChunkLayout) -> Iterator[Tuple[slice, slice, slice, bool]]:
    """(rows, heads, group, reverse) of blocks covering every row of every direction."""
    n_rows, n_heads = _block_shape(lay)
    for d in lay.directions:
        for r in range(d.rows.start, d.rows.stop, n_rows):
            for h in range(0, lay.heads, n_heads):
                g = h // lay.per_group
                yield (slice(r, min(r + n_rows, d.rows.stop)), slice(h, h + n_heads),
                       slice(g, g + 1), d.reverse)


def _block_buffer(lay: ChunkLayout) -> Tensor:
    rows, heads = _block_shape(lay)
    return lay.new(rows * heads * lay.n_chunks * lay.q * lay.q)


def rectangle_sums_(G: Tensor, reverse: bool) -> Tensor:
    """For causal (..., Q, Q) matrices G: R_k = the sum of G_ij over i at or after k and j before
    k in scan order, the pairs whose exponent s_i - s_j holds step k. (..., Q), from running sums
    (G is overwritten), so that no term is added and then subtracted again."""
    if reverse:  # j > k >= i: prefix sums down the columns, summed right of the diagonal
        return G.cumsum_(-2).triu_(1).sum(-1)
    sums = G.cumsum_(-1).tril_(-1).sum(-2)  # column j: sum over i > j of sum_{j' <= j} G_ij'
    return F.pad(sums[..., :-1], (1, 0))


def chunk_cb(lay: ChunkLayout, B_s: Tensor, C_s: Tensor) -> Tensor:
    """The causal C_i . B_j of every chunk, (R, G, n_c, Q, Q), from B_s, C_s (R, G, Lp, N)."""
    q = lay.q
    B3, C3 = (t.view(-1, q, lay.dstate) for t in (B_s, C_s))
    CB = torch.bmm(C3, B3.transpose(1, 2)).view(lay.rows, lay.groups, lay.n_chunks, q, q)
    for d in lay.directions:
        _causal_(CB[d.rows], d.reverse)
    return CB


def chunk_scan_diag_fwd(lay: ChunkLayout, x_dt: Tensor, CB: Tensor, cum: DtCumsum) -> Tensor:
    """y = (exp(s_i - s_j) o CB) x_dt over the diagonal blocks, (R, H, Lp, P), with the masks
    exp(s_i - s_j) of :func:`decay_mask` made a block of heads at a time."""
    q, P = lay.q, lay.headdim
    y = lay.new(lay.rows, lay.heads, lay.padded, P)
    buffer = _block_buffer(lay)
    for r, heads, grp, rev in head_blocks(lay):
        s = cum.dA_cumsum[r, heads]
        work = buffer[:s.numel() * q].view(*s.shape, q)
        decay_mask(s, rev, cum.monotone, cum.split, out=work).mul_(CB[r, grp])
        torch.bmm(work.view(-1, q, q), x_dt[r, heads].view(-1, q, P),
                  out=y[r, heads].view(-1, q, P))
    return y


def chunk_scan_diag_bwd(lay: ChunkLayout, dy: Tensor, x_dt: Tensor, B_s: Tensor, C_s: Tensor,
                        cum: DtCumsum, CB: Tensor, grads: 'ScanGrads') -> None:
    """Backward of :func:`chunk_scan_diag_fwd` (the masks made again, a block of heads at a
    time): sets grads.d_x_dt = (mask o CB)^T dy, grads.dB and grads.dC from dCB = sum over a
    group's heads of mask o (dy x_dt^T), and adds the decay gradient: with
    G_ij = (dy_i . x_dt_j) exp(s_i - s_j) CB_ij, ddA_k += the sum of G over the rectangle of k
    (:func:`rectangle_sums_`)."""
    R, P, G, q, nc, N = lay.rows, lay.headdim, lay.groups, lay.q, lay.n_chunks, lay.dstate
    dCB = lay.zeros(R, G, nc, q, q)
    masks, buffer = _block_buffer(lay), _block_buffer(lay)
    for r, heads, grp, rev in head_blocks(lay):
        s, CB_block = cum.dA_cumsum[r, heads], CB[r, grp]
        e = decay_mask(s, rev, cum.monotone, cum.split,
                       out=masks[:s.numel() * q].view(*s.shape, q))
        work = torch.mul(e, CB_block, out=buffer[:e.numel()].view(e.shape))
        work3, dy3, x3 = (t.view(-1, q, t.shape[-1]) for t in (work, dy[r, heads],
                                                               x_dt[r, heads]))
        torch.bmm(work3.transpose(1, 2), dy3, out=grads.d_x_dt[r, heads].view(-1, q, P))
        torch.bmm(dy3, x3.transpose(1, 2), out=work3).mul_(e.view(-1, q, q))
        dCB[r, grp] += work.sum(1, keepdim=True)
        grads.ddA[r, heads] += rectangle_sums_(work.mul_(CB_block), rev)
    for d in lay.directions:
        _causal_(dCB[d.rows], d.reverse)  # the masks' non-causal side is not zero
    dCB = dCB.view(-1, q, q)
    B3, C3 = (t.view(-1, q, N) for t in (B_s, C_s))
    torch.bmm(dCB, B3, out=grads.dC.view(-1, q, N))
    torch.bmm(dCB.transpose(1, 2), C3, out=grads.dB.view(-1, q, N))


def chunk_scan_off_fwd(lay: ChunkLayout, v: DirectionViews, c: int, h: Tensor, y: Tensor,
                       C_states: Tensor) -> None:
    """y_i += exp(s_i) C_i H_c for chunk c, with H_c = h (B, G, N, Hg, P) and y the direction's
    (B, G, Lp, Hg, P) view; C_i H_c goes through ``C_states`` (B, G, Q, Hg, P)."""
    tokens = lay.chunk(c)
    torch.bmm(v.C[:, c], _state_matrices(lay, h), out=_token_matrices(lay, C_states))
    y[:, :, tokens].addcmul_(C_states, v.from_entry[:, :, tokens])


def chunk_scan_off_bwd(lay: ChunkLayout, v: DirectionViews, c: int, h: Tensor,
                       C_states: Tensor, d_out: Tensor, d_rows: Tensor, out: Tensor) -> Tensor:
    """Backward of :func:`chunk_scan_off_fwd` (C_states: chunk c's C_i H_c):
    dC_i += exp(s_i) dy_i H_c^T (into v.dC), dL/ds_i = exp(s_i) dy_i . C_i H_c (into
    v.out_terms); returns chunk c's share of dL/dH_c, sum_i exp(s_i) C_i dy_i^T, in ``out``
    (B, G, N, Hg, P). ``d_out`` is a (B, G, Q, Hg, P) buffer, ``d_rows`` a (B G, Q, N) one."""
    tokens = lay.chunk(c)
    torch.mul(v.dy[:, :, tokens], v.from_entry[:, :, tokens], out=d_out)
    d_out3 = _token_matrices(lay, d_out)
    v.dC[:, c] += torch.bmm(d_out3, _state_matrices(lay, h).transpose(1, 2), out=d_rows)
    torch.bmm(v.C[:, c].transpose(1, 2), d_out3, out=_state_matrices(lay, out))
    torch.sum(d_out.mul_(C_states), -1, out=v.out_terms[:, :, tokens])
    return out


def chunk_scan_out_fwd(lay: ChunkLayout, y: Tensor, inp: ScanInputs,
                       gate: bool = True) -> Tensor:
    """The output (K, B, L, H, P) in x's dtype: y + D x, times silu(z) if gated; without
    ``gate``, y + D x in the compute dtype (the gate's input, for the backward pass)."""
    out = lay.new(*inp.x.shape)
    for x, D, z, out_d, d in zip(inp.x, inp.per_direction('D'), inp.per_direction('z'), out,
                                 lay.directions):
        y_d = y[d.rows, :, d.tokens].transpose(1, 2)
        if D is None:
            out_d.copy_(y_d)
        else:
            torch.addcmul(y_d, x, _skip_weight(D, lay.dtype), out=out_d)
        if gate and z is not None:
            out_d.mul_(F.silu(z.to(lay.dtype)))
    return out.to(inp.x.dtype) if gate else out


class ScanGrads(NamedTuple):
    """Gradients that the backward stages fill in (compute dtype unless said).

    Attributes:
        dy: dL/dy before D and the gate, head-major (R, H, Lp, P), 0 on the padding.
        d_x_dt: dL/d(dt' x) (R, H, Lp, P).
        dB, dC: (R, G, Lp, N).
        ddA: dL/d(dt' A) (R, H, n_c, Q), summed where it is computed.
        ddA_cumsum: dL/ds (R, H, n_c, Q).
        dD, dz: dL/dD (K, H) or (K, H, P) and dL/dz (K, B, L, H, P) in their inputs' dtypes,
            or None.
    """

    dy: Tensor
    d_x_dt: Tensor
    dB: Tensor
    dC: Tensor
    ddA: Tensor
    ddA_cumsum: Tensor
    dD: Optional[Tensor]
    dz: Optional[Tensor]


def chunk_scan_out_bwd(lay: ChunkLayout, dout: Optional[Tensor], gate_inputs: Optional[Tensor],
                       inp: ScanInputs) -> ScanGrads:
    """Backward of :func:`chunk_scan_out_fwd` for dout (K, B, L, H, P) or None (and, with a
    gate, its input y + D x): dy (head-major, for the other stages), dD, dz; allocates the other
    gradients of :class:`ScanGrads`."""
    R, H, P = lay.rows, lay.heads, lay.headdim
    dy = lay.new(R, H, lay.padded, P)
    dz = None if inp.z is None else lay.new(*inp.z.shape)
    if dout is None:
        dy.zero_()
        if dz is not None:
            dz.zero_()
        d_skips = [lay.zeros(*D.shape) for D in inp.per_direction('D') if D is not None]
    else:
        d_skips = [_out_bwd(lay, d, *args, dy)
                   for d, *args in zip(lay.directions, dout, inp.x, inp.per_direction('D'),
                                       inp.per_direction('z'), unstack(dz, len(lay.directions)),
                                       unstack(gate_inputs, len(lay.directions)))]
    return ScanGrads(
        dy=dy, d_x_dt=lay.new(R, H, lay.padded, P),
        dB=lay.new(R, lay.groups, lay.padded, lay.dstate),
        dC=lay.new(R, lay.groups, lay.padded, lay.dstate),
        ddA=lay.zeros(R, H, lay.n_chunks, lay.q), ddA_cumsum=lay.zeros(R, H, lay.n_chunks, lay.q),
        dD=None if inp.D is None else torch.stack(d_skips).to(inp.D.dtype),
        dz=None if dz is None else dz.to(inp.z.dtype))


def _out_bwd(lay: ChunkLayout, d: Direction, dout: Tensor, x: Tensor, D: Optional[Tensor],
             z: Optional[Tensor], dz: Optional[Tensor], gate_input: Optional[Tensor],
             dy: Tensor) -> Optional[Tensor]:
    """One direction of :func:`chunk_scan_out_bwd`: its rows of dy, dz (into ``dz``), and
    dL/dD (in D's shape) or None."""
    lay.zero_padding(dy[d.rows], d, dim=2)
    dy_d = dy[d.rows, :, d.tokens].transpose(1, 2)  # (B, L, H, P) view
    dout = dout.to(lay.dtype)
    if z is None:
        dy_d.copy_(dout)
    else:
        zc = z.to(lay.dtype)
        sig = torch.sigmoid(zc)
        # d silu(z) / dz = sigmoid(z) (1 + z (1 - sigmoid(z)))
        torch.mul(dout * gate_input * sig, 1 + zc * (1 - sig), out=dz)
        torch.mul(dout, sig.mul_(zc), out=dy_d)
    if D is None:
        return None
    d_skip = summed_products(lay, x, dy_d, (0,)).sum(0)  # (H, P)
    return d_skip.sum(-1) if D.dim() == 1 else d_skip
