"""Chunked SSD in PyTorch: the CPU production path (any device; fp32 accumulation).

The sequence is cut into n_c chunks of Q <= chunk_size tokens (<= CPU_CHUNK_CAP on CPU; balanced,
so padding < n_c tokens).
With u = dt' x, a = dt' A and ``cum`` the running sum of ``a`` inside a chunk in processing order
(prefix sums forward, suffix sums reverse; kept in float64, it is only (B, H, L)), per batch row
and head:

1. intra-chunk: y_diag = (E o C B^T) u with E_ij = exp(cum_i - cum_j) on the causal side
   (i >= j forward, i <= j reverse) and 0 elsewhere;
2. chunk states: S_c = sum_j exp(cum_exit - cum_j) u_j B_j^T (exit = last processed token);
3. states passed between chunks in processing order: H_{c+1} = exp(cum_exit) H_c + S_c;
4. y_off_i = exp(cum_i) H_c C_i for the state H_c entering the chunk.

Both directions of a bidirectional call are stacked along the batch: a reverse row differs only in
its masks (suffix sums, upper-triangular E) and in the order of step 3, so no token is flipped.
The backward pass is written by hand and saves only E (B, H, n_c, Q, Q) and the entering states
(B, n_c, H, P, N) besides O(B L H P) tensors; the decay gradient comes from row/column identities
(d cum_i = dy_i . y_i - u_i . du_i plus the state terms), so no (Q, Q) gradient of the segment
sums is ever formed.

CPU cost is mostly memory traffic, so: decay exponents are clamped (see ``_MIN_EXPONENT``);
E o C B^T only ever exists for a block of heads of one row; steps 2-4 run chunk by chunk in
chunk-sized buffers (skipping the zero state entering the first chunk and the unused state leaving
the last); products that are only summed go through a buffer of a few rows; and D x is added inside the
Function. A fresh large buffer costs page faults when first written (on Linux a new mapping, ~10x
the cost of writing memory already mapped), so fewer buffers is faster as well as smaller.
"""
import math
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

Tensor = torch.Tensor


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


CPU_CHUNK_CAP: Optional[int] = 64
"""Longest chunk used for CPU tensors (None: no cap). The per-token cost of the intra-chunk part
grows with Q (the (Q, Q) masks are elementwise work, memory bound on a CPU) while the state part
shrinks with it; around 64 tokens the sum is smallest on CPUs (tools/benchmarks/ssd.py
--chunk-sweep). The result does not depend on the chunk length."""


def chunk_layout(length: int, chunk_size: int) -> Tuple[int, int]:
    """(n_chunks, chunk length): chunks of at most ``chunk_size`` tokens, padding < n_chunks."""
    n_chunks = max(1, math.ceil(length / chunk_size))
    return n_chunks, max(1, math.ceil(length / n_chunks))


def _running_sum(a: Tensor, reverse: bool) -> Tensor:
    """Inclusive prefix sums along the last dim, or suffix sums when ``reverse``."""
    if reverse:
        return a.flip(-1).cumsum(-1).flip(-1)
    return a.cumsum(-1)


class _Layout:
    """Sizes, row blocks (one block of B rows per direction) and tensor views of the stacked scan.

    Layouts (R = rows, Lp = n_c * Q, Hg = H // G):
      head-major  (R, H, Lp, P)     -> bmm view (R H n_c, Q, P)   intra-chunk products
      group-token (R, G, Lp, Hg, P) -> bmm view (R G n_c, Q, Hg P) state products: the heads of
                                       a group side by side, so one product serves the group
      B, C        (R, G, Lp, N)     -> bmm view (R G n_c, Q, N)
      states      (R, G, n_c, N, Hg, P), N-major so that every product reads row-major operands
    """

    def __init__(self, x: Tensor, B: Tensor, reverse: Sequence[bool], chunk_size: int):
        self.batch, self.length, self.heads, self.headdim = x.shape
        self.groups, self.dstate = B.shape[2], B.shape[3]
        self.per_group = self.heads // self.groups
        self.dtype = compute_dtype(x)
        self.reverse = tuple(reverse)
        self.rows = self.batch * len(self.reverse)
        if x.device.type == 'cpu' and CPU_CHUNK_CAP is not None:
            chunk_size = min(chunk_size, CPU_CHUNK_CAP)
        self.n_chunks, self.q = chunk_layout(self.length, chunk_size)
        self.padded = self.n_chunks * self.q
        self.blocks = [(slice(d * self.batch, (d + 1) * self.batch), rev)
                       for d, rev in enumerate(self.reverse)]

    def new(self, *shape, like: Tensor, pad_dim: Optional[int] = None) -> Tensor:
        """Uninitialised buffer; with ``pad_dim`` the padded tokens (past L there) are zeros."""
        out = torch.empty(*shape, dtype=self.dtype, device=like.device)
        if pad_dim is not None and self.padded > self.length:
            out.narrow(pad_dim, self.length, self.padded - self.length).zero_()
        return out

    def stack_groups(self, tensors: Sequence[Tensor]) -> Tensor:
        """(B, L, G, N) per direction -> (R, G, Lp, N) in the compute dtype, zero padded."""
        out = self.new(self.rows, self.groups, self.padded, self.dstate, like=tensors[0],
                       pad_dim=2)
        for (rows, _), t in zip(self.blocks, tensors):
            out[rows, :, :self.length] = t.transpose(1, 2)
        return out

    def bmm_rows(self, t: Tensor) -> Tensor:
        """Contiguous (R, K, Lp, ...) -> (R K n_c, Q, prod(...)) view."""
        return t.view(-1, self.q, t[0, 0, 0].numel())

    def group_token(self, t: Tensor) -> Tensor:
        """(B', L', H, P) (any strides) -> (B', G, L', Hg, P) view."""
        return t.unflatten(2, (self.groups, self.per_group)).transpose(1, 2)

    def head_to_group_token(self, t: Tensor) -> Tensor:
        """Head-major (R, H, Lp, P) -> (R, G, Lp, Hg, P) view."""
        return t.unflatten(1, (self.groups, self.per_group)).transpose(2, 3)

    def per_head(self, t: Tensor) -> Tensor:
        """(R, H, Lp) -> (R, G, Lp, Hg, 1) view, to scale group-token tensors."""
        return t.unflatten(1, (self.groups, self.per_group)).transpose(2, 3).unsqueeze(-1)

    def state_to_n_major(self, h: Tensor) -> Tensor:
        """(B, H, P, N) -> (B, G, N, Hg, P) copy."""
        h = h.reshape(h.shape[0], self.groups, self.per_group, self.headdim, self.dstate)
        return h.permute(0, 1, 4, 2, 3).contiguous()

    def state_from_n_major(self, h: Tensor) -> Tensor:
        """(B, G, N, Hg, P) -> (B, H, P, N) copy."""
        return h.permute(0, 1, 3, 4, 2).reshape(h.shape[0], self.heads, self.headdim,
                                                 self.dstate)

    def head_scalars(self, t: Tensor) -> Tensor:
        """(R, H, n_c) -> (R, G, n_c, 1, Hg, 1) view, to scale N-major states."""
        t = t.unflatten(1, (self.groups, self.per_group)).transpose(2, 3)
        return t[:, :, :, None, :, None]


_EXACT_CUM = 512.0  # float32 differences of running sums below this are off by < 3e-5
# exp() of these is a normal number (float32: 1.2e-26, float64: 5e-261): a smaller decay is
# negligible next to the diagonal's exp(0) = 1 in every sum it enters
_MIN_EXPONENT = {torch.float32: -60.0, torch.float64: -600.0}
_MASK_BLOCK_BYTES = 4 * 2**20  # (Q, Q) matrices of all chunks are built per head block this big


def _exit_values(cum: Tensor, layout: _Layout) -> Tensor:
    """cum at each chunk's last processed token: (R, H, n_c, Q) -> (R, H, n_c)."""
    return torch.cat([cum[rows, ..., 0] if rev else cum[rows, ..., -1]
                      for rows, rev in layout.blocks], dim=0)


def _decay_mask(cum: Tensor, reverse: bool, out: Tensor) -> Tensor:
    """E (..., n_c, Q, Q) = exp(cum_i - cum_j) on the causal side (i >= j, or i <= j when
    ``reverse``), 0 elsewhere, written into ``out`` (float32 / float64) from cum (..., n_c, Q).

    ``cum`` is float64. In float32, cum_i - cum_j loses |cum| * 2^-24 to rounding, which matters
    once |cum| is large (|dt' A| ~ 1e4 per step); then cum is split into a float32 head and tail
    and the difference of the heads is exact where E is not negligible (Sterbenz), so
    E = exp((hi_i - hi_j) + (lo_i - lo_j)).
    Exponents are clamped at ``_MIN_EXPONENT``: exp of an exponent that underflows, and any
    product with the denormals it yields, takes a microcode slow path ~10-90x slower on x86.
    The non-causal side is zeroed before the exp (so it cannot overflow) and after it.
    """
    hi = cum.to(out.dtype)
    torch.sub(hi.unsqueeze(-1), hi.unsqueeze(-2), out=out)
    if out.dtype != torch.float64 and cum.abs().max() > _EXACT_CUM:
        lo = (cum - hi.double()).to(out.dtype)
        out.add_(lo.unsqueeze(-1)).sub_(lo.unsqueeze(-2))
    zero_non_causal = out.triu_ if reverse else out.tril_
    zero_non_causal()
    out.clamp_(min=_MIN_EXPONENT[out.dtype]).exp_()
    return zero_non_causal()


def _decay(exponent: Tensor, dtype: torch.dtype) -> Tensor:
    """exp(exponent) in ``dtype``, exponents clamped at ``_MIN_EXPONENT`` (see _decay_mask)."""
    return exponent.clamp(min=_MIN_EXPONENT[dtype]).to(dtype).exp_()


def _state_decays(cum: Tensor, lay: '_Layout') -> Tuple[Tensor, Tensor, Tensor]:
    """From cum (R, H, n_c, Q): w = exp(cum_exit - cum) (R, G, Lp, Hg, 1) to each chunk's exit,
    decay = exp(cum_exit) (R, G, n_c, 1, Hg, 1) across each chunk, decay_in = exp(cum)
    (R, G, Lp, Hg, 1) from each chunk's entry."""
    exit_cum = _exit_values(cum, lay)  # (R, H, n_c)
    w = _decay(exit_cum.unsqueeze(-1) - cum, lay.dtype).view(lay.rows, lay.heads, lay.padded)
    decay_in = _decay(cum, lay.dtype).view(lay.rows, lay.heads, lay.padded)
    return (lay.per_head(w), lay.head_scalars(_decay(exit_cum, lay.dtype)),
            lay.per_head(decay_in))


class _ChunkedScan(torch.autograd.Function):
    """Scan of several directions stacked along the batch (see the module docstring).

    forward(chunk_size, reverse flags, want_final, *per-direction (x, dt', A, B, C, D, h0))
    returns the per-direction y + D x (B, L, H, P) in the compute dtype, then (if want_final) the
    final states (B, H, P, N). D (H,) or (H, P) and h0 may be None. Without a gradient to
    compute, E is not kept and is built per head block in one reused buffer.
    """

    @staticmethod
    def forward(ctx, chunk_size: int, reverse: Tuple[bool, ...], want_final: bool, *flat):
        dirs = [flat[i:i + 7] for i in range(0, len(flat), 7)]
        xs, dts, As, Bs, Cs, Ds, h0s = (list(t) for t in zip(*dirs))
        lay = _Layout(xs[0], Bs[0], reverse, chunk_size)
        R, H, P, N, G = lay.rows, lay.heads, lay.headdim, lay.dstate, lay.groups
        nc, q, Lp, L = lay.n_chunks, lay.q, lay.padded, lay.length
        dev = xs[0].device

        dt_s = lay.new(R, Lp, H, like=xs[0], pad_dim=1)
        for (rows, _), dt in zip(lay.blocks, dts):
            dt_s[rows, :L] = dt
        A_rows = torch.cat([A.to(lay.dtype).expand(lay.batch, H) for A in As])  # (R, H)
        a = (dt_s.double() * A_rows[:, None].double()).transpose(1, 2).reshape(R, H, nc, q)
        cum = torch.cat([_running_sum(a[rows], rev) for rows, rev in lay.blocks])
        B_s, C_s = lay.stack_groups(Bs), lay.stack_groups(Cs)  # (R, G, Lp, N)
        B3, C3 = lay.bmm_rows(B_s), lay.bmm_rows(C_s)  # (R G n_c, Q, N)

        u = lay.new(R, H, Lp, P, like=xs[0], pad_dim=2)  # head-major dt' x
        u_tok = u.transpose(1, 2)
        for (rows, _), x, dt in zip(lay.blocks, xs, dts):
            torch.mul(x, dt.unsqueeze(-1), out=u_tok[rows, :L])

        needs_grad = any(ctx.needs_input_grad)
        cb = torch.bmm(C3, B3.transpose(1, 2))  # (R G n_c, Q, Q)
        # E (kept for the backward pass when a gradient is needed) and E o CB, a few heads of one
        # row at a time: E o CB is only ever block-sized
        cb = cb.view(R, G, 1, nc, q, q)
        mask = lay.new(R, H, nc, q, q, like=u) if needs_grad else None
        y = lay.new(R, H, Lp, P, like=u)  # head-major
        buffer = lay.new(math.prod(_block_shape(lay)), nc, q, q, like=u).view(-1)
        for r, heads, grp, rev in _head_blocks(lay):
            mix = buffer[:cum[r, heads].numel() * q].view(*cum[r, heads].shape, q)
            if mask is None:
                _decay_mask(cum[r, heads], rev, out=mix).mul_(cb[r, grp])
            else:
                torch.mul(_decay_mask(cum[r, heads], rev, out=mask[r, heads]), cb[r, grp],
                          out=mix)
            torch.bmm(mix.view(-1, q, q), u[r, heads].view(-1, q, P),
                      out=y[r, heads].view(-1, q, P))
        del buffer, mix
        use_states = nc > 1 or want_final or any(h is not None for h in h0s)
        entering, finals = None, []
        if use_states:
            # chunk by chunk in each direction's order; the state entering the first chunk is
            # h0 (or zero: no y_off there), the one leaving the last is only wanted as final
            Hg, bg = lay.per_group, lay.batch * G
            w, decay, decay_in = _state_decays(cum, lay)
            u_gt, y_gt = lay.head_to_group_token(u), lay.head_to_group_token(y)
            if needs_grad:
                entering = lay.new(R, G, nc, N, Hg, P, like=u)
            h, spare, state = (lay.new(lay.batch, G, N, Hg, P, like=u) for _ in range(3))
            uw, y_off = (lay.new(lay.batch, G, q, Hg, P, like=u) for _ in range(2))
            for d, (rows, rev) in enumerate(lay.blocks):
                B_c, C_c = (t[rows].view(bg, nc, q, N) for t in (B_s, C_s))
                h_is_zero = h0s[d] is None
                if h_is_zero:
                    h.zero_()
                else:
                    h.copy_(lay.state_to_n_major(h0s[d].to(lay.dtype)))
                for i, c in enumerate(range(nc - 1, -1, -1) if rev else range(nc)):
                    tokens = slice(c * q, (c + 1) * q)
                    if entering is not None:
                        entering[rows, :, c] = h
                    if not h_is_zero:
                        torch.bmm(C_c[:, c], h.view(bg, N, Hg * P), out=y_off.view(bg, q, -1))
                        y_gt[rows, :, tokens].addcmul_(y_off, decay_in[rows, :, tokens])
                    if i < nc - 1 or want_final:
                        torch.mul(u_gt[rows, :, tokens], w[rows, :, tokens], out=uw)
                        torch.bmm(B_c[:, c].transpose(1, 2), uw.view(bg, q, Hg * P),
                                  out=state.view(bg, N, Hg * P))
                        torch.addcmul(state, decay[rows, :, c], h, out=spare)
                        h, spare, h_is_zero = spare, h, False
                if want_final:
                    finals.append(lay.state_from_n_major(h))
            del uw, y_off, state, spare

        outs = []
        for (rows, _), x, D in zip(lay.blocks, xs, Ds):
            y_d = y[rows, :, :L].transpose(1, 2)  # (B, L, H, P) view
            out = torch.empty(lay.batch, L, H, P, dtype=lay.dtype, device=dev)
            if D is None:
                out.copy_(y_d)
            else:
                torch.addcmul(y_d, x, _skip_weight(D, lay.dtype), out=out)
            outs.append(out)

        ctx.layout, ctx.use_states, ctx.want_final = lay, use_states, want_final
        ctx.has_h0 = [h is not None for h in h0s]
        ctx.dtypes = [[t.dtype if t is not None else None for t in d] for d in dirs]
        ctx.d_shapes = [None if D is None else D.shape for D in Ds]
        if needs_grad:
            ctx.save_for_backward(*xs, *As, *[D if D is not None else x for D, x in zip(Ds, xs)],
                                  dt_s, B_s, C_s, cum, u, mask, cb, y, entering)
        return tuple(outs + finals)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        lay: _Layout = ctx.layout
        R, H, P, N, G = lay.rows, lay.heads, lay.headdim, lay.dstate, lay.groups
        nc, q, Lp, L, nd = lay.n_chunks, lay.q, lay.padded, lay.length, len(lay.blocks)
        saved = ctx.saved_tensors
        xs, As, Ds = saved[:nd], saved[nd:2 * nd], saved[2 * nd:3 * nd]
        Ds = [D if shape is not None else None for D, shape in zip(Ds, ctx.d_shapes)]
        dt_s, B_s, C_s, cum, u, mask, cb, y = saved[3 * nd:3 * nd + 8]
        dys = grads[:nd]
        d_finals = grads[nd:] if ctx.want_final else [None] * nd
        B3, C3 = lay.bmm_rows(B_s), lay.bmm_rows(C_s)
        dev = u.device

        dy = lay.new(R, H, Lp, P, like=u, pad_dim=2)  # head-major
        dy_tok = dy.transpose(1, 2)
        for (rows, _), g in zip(lay.blocks, dys):
            dy_tok[rows, :L] = g
        # products that are only summed, a block of rows at a time (at least one row)
        row_elems = H * Lp * P
        products = lay.new(max(row_elems, _MASK_BLOCK_BYTES * 8 // torch.finfo(lay.dtype).bits
                               // row_elems * row_elems), like=u)

        # intra-chunk part, per head block as in forward: du = (E o CB)^T dy,
        # d(E o CB) = dy u^T, and E o d(E o CB) summed over the heads of a group is d(CB)
        du = lay.new(R, H, Lp, P, like=u)
        d_cb = torch.zeros(R, G, nc, q, q, dtype=lay.dtype, device=dev)
        buffer = lay.new(math.prod(_block_shape(lay)), nc, q, q, like=u).view(-1)
        for r, heads, grp, _ in _head_blocks(lay):
            e = mask[r, heads]
            work = torch.mul(e, cb[r, grp], out=buffer[:e.numel()].view(e.shape))
            work3, dy3, u3 = (t.view(-1, q, t.shape[-1]) for t in (work, dy[r, heads],
                                                                  u[r, heads]))
            torch.bmm(work3.transpose(1, 2), dy3, out=du[r, heads].view(-1, q, P))
            torch.bmm(dy3, u3.transpose(1, 2), out=work3).mul_(e.view(-1, q, q))
            d_cb[r, grp] += work.sum(1)
        del buffer, work, work3
        d_cb = d_cb.view(-1, q, q)
        dC3 = torch.bmm(d_cb, B3)  # (R G n_c, Q, N)
        dB3 = torch.bmm(d_cb.transpose(1, 2), C3)
        del d_cb
        # d cum_i = dy_i . y_i (row i of E o CB and the incoming-state term) - u_i . du_i (column i)
        d_cum = _dot_rows(dy, y, products).sub_(_dot_rows(u, du, products)).view(R, H, nc, q)

        d_h0 = [None] * nd
        if ctx.use_states:
            # the forward's chunk loop run backward in time; g = gradient of the state leaving
            # chunk c (zero after the last chunk unless the final state has a gradient)
            entering = saved[3 * nd + 8]
            Hg, bg = lay.per_group, lay.batch * G
            w, decay, decay_in = _state_decays(cum, lay)
            u_gt, dy_gt, du_gt = (lay.head_to_group_token(t) for t in (u, dy, du))
            d_decay = entering.new_zeros(R, G, nc, Hg)
            d_log_w = entering.new_zeros(R, G, Lp, Hg)
            g, spare, d_entering, product = (lay.new(lay.batch, G, N, Hg, P, like=u)
                                             for _ in range(4))
            uw, d_uw, dv = (lay.new(lay.batch, G, q, Hg, P, like=u) for _ in range(3))
            d_bc = lay.new(bg, q, N, like=u)  # one chunk's d B (or d C) from the states
            for d, (rows, rev) in enumerate(lay.blocks):
                B_c, C_c, dB_c, dC_c = (t.view(R, G, Lp, N)[rows].view(bg, nc, q, N)
                                        for t in (B_s, C_s, dB3, dC3))
                g_is_zero = d_finals[d] is None
                if g_is_zero:
                    g.zero_()
                else:
                    g.copy_(lay.state_to_n_major(d_finals[d].to(lay.dtype)))
                for i, c in enumerate(range(nc) if rev else range(nc - 1, -1, -1)):
                    tokens = slice(c * q, (c + 1) * q)
                    g3 = g.view(bg, N, Hg * P)
                    if not g_is_zero:
                        d_decay[rows, :, c] = torch.mul(g, entering[rows, :, c],
                                                        out=product).sum((2, 4))
                        torch.mul(u_gt[rows, :, tokens], w[rows, :, tokens], out=uw)
                        dB_c[:, c] += torch.bmm(uw.view(bg, q, Hg * P), g3.transpose(1, 2),
                                                out=d_bc)
                        torch.bmm(B_c[:, c], g3, out=d_uw.view(bg, q, Hg * P))
                        du_gt[rows, :, tokens].addcmul_(d_uw, w[rows, :, tokens])
                        d_log_w[rows, :, tokens] = d_uw.mul_(uw).sum(-1)
                    if i == nc - 1 and not ctx.has_h0[d]:
                        break  # the state entering the first chunk is a constant zero
                    torch.mul(dy_gt[rows, :, tokens], decay_in[rows, :, tokens], out=dv)
                    dv3 = dv.view(bg, q, Hg * P)
                    dC_c[:, c] += torch.bmm(dv3, entering[rows, :, c].view(bg, N, Hg * P)
                                            .transpose(1, 2), out=d_bc)
                    torch.bmm(C_c[:, c].transpose(1, 2), dv3, out=d_entering.view(bg, N, -1))
                    if g_is_zero:
                        spare.copy_(d_entering)
                    else:
                        torch.addcmul(d_entering, decay[rows, :, c], g, out=spare)
                    g, spare, g_is_zero = spare, g, False
                if ctx.has_h0[d]:
                    d_h0[d] = lay.state_from_n_major(g)
            d_exit = d_decay * decay[:, :, :, 0, :, 0]  # (R, G, n_c, Hg)
            d_log_w = d_log_w.transpose(2, 3).reshape(R, H, nc, q)
            d_exit = d_exit.transpose(2, 3).reshape(R, H, nc) + d_log_w.sum(-1)
            d_cum = d_cum - d_log_w
            for rows, rev in lay.blocks:
                d_cum[rows, ..., 0 if rev else -1] += d_exit[rows]
        # cum = prefix sums of a (suffix sums when reverse): da = the opposite running sums
        da = torch.cat([_running_sum(d_cum[rows], not rev) for rows, rev in lay.blocks])
        da = da.view(R, H, Lp).transpose(1, 2)  # (R, Lp, H)
        du_tok = du.transpose(1, 2)
        dB_s, dC_s = (t.view(R, G, Lp, N) for t in (dB3, dC3))

        out = []
        for d, (rows, _) in enumerate(lay.blocks):
            x, A, D, g = xs[d], As[d], Ds[d], dys[d]
            x_dt, dt_dt, _, B_dt, C_dt, D_dt, h0_dt = ctx.dtypes[d]
            dt, du_d, da_d = dt_s[rows, :L], du_tok[rows, :L], da[rows, :L]
            ddt = _dot_rows(du_d, x, products).add_(da_d * A.to(lay.dtype)).to(dt_dt)
            dx = torch.mul(du_d, dt.unsqueeze(-1))
            dD = None
            if D is not None:
                dx.addcmul_(g, _skip_weight(D, lay.dtype))
                dD = _dot_rows(g, x, products, dims=(0,)).sum(0)  # (H, P)
                dD = (dD.sum(-1) if D.dim() == 1 else dD).to(D_dt)
            dA = (da_d * dt).sum((0, 1)).to(A.dtype)
            dB = dB_s[rows, :, :L].transpose(1, 2).to(B_dt)
            dC = dC_s[rows, :, :L].transpose(1, 2).to(C_dt)
            dh0 = d_h0[d].to(h0_dt) if ctx.has_h0[d] else None  # an h0 turns the states on
            out += [dx.to(x_dt), ddt, dA, dB, dC, dD, dh0]
        return (None, None, None, *out)


def _block_shape(lay: '_Layout') -> Tuple[int, int]:
    """(rows, heads) per block of :func:`_head_blocks`: whole heads of one group, as many as fit
    their (Q, Q) matrices for all chunks in ``_MASK_BLOCK_BYTES`` (at least one); when all heads
    of a row fit, several rows of one direction (then a block is contiguous in every tensor)."""
    per_head = lay.n_chunks * lay.q * lay.q * torch.finfo(lay.dtype).bits // 8
    heads = max(k for k in range(1, lay.per_group + 1)
                if lay.per_group % k == 0 and (k == 1 or k * per_head <= _MASK_BLOCK_BYTES))
    rows = max(1, _MASK_BLOCK_BYTES // (lay.heads * per_head)) if heads == lay.heads else 1
    return min(rows, lay.batch), heads


def _head_blocks(lay: '_Layout') -> Iterator[Tuple[slice, slice, int, bool]]:
    """(rows, heads, group, reverse) for the blocks of :func:`_block_shape`, covering every
    stacked row of every direction."""
    n_rows, n_heads = _block_shape(lay)
    for rows, rev in lay.blocks:
        for r in range(rows.start, rows.stop, n_rows):
            for h in range(0, lay.heads, n_heads):
                yield (slice(r, min(r + n_rows, rows.stop)), slice(h, h + n_heads),
                       h // lay.per_group, rev)


def _dot_rows(a: Tensor, b: Tensor, buffer: Tensor, dims: Tuple[int, ...] = (-1,)) -> Tensor:
    """(a * b) summed over ``dims`` of each a[i], stacked over i. The products go through the
    flat ``buffer`` (at least a[0].numel() elements), as many indices of dim 0 at a time as fit,
    so no a-sized product is allocated and small rows are not summed one call at a time."""
    per_row = a[0].numel()
    step = max(1, buffer.numel() // per_row)
    dims = tuple(d + 1 if d >= 0 else d for d in dims)
    sums = []
    for i in range(0, a.shape[0], step):
        n = min(step, a.shape[0] - i)
        product = buffer[:n * per_row].view(n, *a.shape[1:])
        sums.append(torch.mul(a[i:i + n], b[i:i + n], out=product).sum(dims))
    return torch.cat(sums)


def _skip_weight(D: Tensor, dtype: torch.dtype) -> Tensor:
    """D (H,) or (H, P) -> a factor that broadcasts against (B, L, H, P)."""
    D = D.to(dtype)
    return D[:, None] if D.dim() == 1 else D


def _scan_directions(xs: List[Tensor], dts: List[Tensor], As: List[Tensor], Bs: List[Tensor],
                     Cs: List[Tensor], Ds: List[Optional[Tensor]], h0s: List[Optional[Tensor]],
                     reverse: Tuple[bool, ...], chunk_size: int,
                     want_final: bool) -> Tuple[Tensor, ...]:
    flat = []
    for parts in zip(xs, dts, As, Bs, Cs, Ds, h0s):
        flat.extend(parts)
    return _ChunkedScan.apply(chunk_size, reverse, want_final, *flat)


def _gate(y: Tensor, x: Tensor, z: Optional[Tensor]) -> Tensor:
    """y * silu(z) (if z), cast to x's dtype."""
    if z is not None:
        y = y * F.silu(z.to(y.dtype))
    return y.to(x.dtype)


def ssd_chunk_torch(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 256,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[Tensor] = None,
    return_final_states: bool = False,
    reverse: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Chunked SSD scan; arguments and shapes as :func:`dinomamba_mm.ops.ssd.ssd_scan`."""
    dtp = preprocess_dt(dt, dt_bias, dt_softplus, dt_limit, compute_dtype(x))
    outs = _scan_directions([x], [dtp], [A], [B], [C], [D], [initial_states], (reverse, ),
                            chunk_size, return_final_states)
    y = _gate(outs[0], x, z)
    return (y, outs[1]) if return_final_states else y


Pair = Tuple[Optional[Tensor], Optional[Tensor]]


def ssd_bidirectional_torch(x: Pair, dt: Pair, A: Pair, B: Pair, C: Pair, chunk_size: int,
                            D: Pair, z: Pair, dt_bias: Pair, dt_softplus: bool,
                            dt_limit: Tuple[float, float]) -> Tuple[Tensor, Tensor]:
    """Forward and reverse scans in one stacked pass; every tensor argument is a
    (forward, backward) pair (None allowed for D, z, dt_bias), all in input token order."""
    dts = [preprocess_dt(dt[i], dt_bias[i], dt_softplus, dt_limit, compute_dtype(x[i]))
           for i in range(2)]
    y_fwd, y_bwd = _scan_directions(list(x), dts, list(A), list(B), list(C), list(D),
                                    [None, None], (False, True), chunk_size, False)
    return _gate(y_fwd, x[0], z[0]), _gate(y_bwd, x[1], z[1])
