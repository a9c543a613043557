"""Triton kernels of the chunked SSD scan (Mamba-2 state space duality), forward and backward.

The sequence is cut into chunks of Q tokens (Q is a compile-time block size, 16..64). Per
direction d, batch b, head h (group g = h // (H // G)), with a = the within-chunk inclusive
cumulative sum of dt' * A and a_last its value at the chunk end:

1. ``_dt_cumsum_fwd_kernel``      dt' (bias, softplus, clamp) and a, per chunk.
2. ``_chunk_state_fwd_kernel``    S_c = sum_s exp(a_last - a_s) dt'_s x_s B_s^T        (P x N).
3. ``_state_passing_fwd_kernel``  H_c = exp(a_last[c-1]) H_{c-1} + S_{c-1}, H_0 = initial states
                                  (a sequential loop over chunks, written over S in place).
4. ``_chunk_scan_fwd_kernel``     y_t = sum_{s<=t} (C_t.B_s) exp(a_t - a_s) dt'_s x_s
                                        + exp(a_t) H_c C_t + D x_t, then * silu(z_t).

Backward: ``_chunk_dstate_bwd_kernel`` (the chunk's own share of dL/dH_c),
``_state_passing_bwd_kernel`` (the reverse scan of dL/dH_c over chunks), then per chunk
``_chunk_bwd_dx_kernel`` (dx, dz, partial dD; blocked over P) and ``_chunk_bwd_dbc_kernel``
(per-head dB and dC, ddt, partial dA; a loop over P), split so that each keeps its tiles in
registers.

Index conventions shared by every kernel:

* Direction is the slowest part of the first grid axis; per-direction inputs come as two pointers
  ``<name>0`` / ``<name>1`` with one set of strides (the wrapper makes the strides agree). A
  single-direction launch passes the same pointer twice and a grid with one direction.
* Reverse scans use index arithmetic: scan step i of direction d reads token
  ``i + rev * (L - 1 - 2 i)`` with ``rev = (rev_bits >> d) & 1``; chunks are cut in scan order,
  so the last chunk of a reverse scan ends at token 0. No flipped copies are made.
* Intermediates are float32, contiguous, indexed by the scan order:
  dt', a: (ndir, B, H, nchunks, Q); chunk states: (ndir, B, H, nchunks, P, N).
  Outputs written per token are in input order: (ndir, B, L, H, P) and (ndir, B, L, H, N).
* Masks come from differences of cumulative sums (never products of exponentials); tokens past L
  have dt' = 0, so they neither decay nor inject and a_last is the cumsum at the last real token.
* Matrix products accumulate in float32; operands are in the input dtype (fp16 / bf16 use tensor
  cores), fp32 inputs use ``DOT_PRECISION`` ('tf32x3' on GPU, fp32-accurate).
"""
import triton
import triton.language as tl
from triton import knobs

#: True when the kernels were defined under TRITON_INTERPRET=1 (the decision is made by
#: ``@triton.jit`` at import time): they then run on CPU tensors, with one small config each.
INTERPRETING: bool = bool(knobs.runtime.interpret)


def _configs(gpu: list, interpreter: triton.Config) -> list:
    """Autotune over ``gpu`` when compiling; the interpreter gets one config (it is slow)."""
    return [interpreter] if INTERPRETING else gpu


_BLOCK_P_CONFIGS = _configs(
    [triton.Config({'BLOCK_P': bp}, num_warps=w, num_stages=s)
     for bp in (32, 64) for w in (4, 8) for s in (1, 2)],
    triton.Config({'BLOCK_P': 16}))
_FLAT_CONFIGS = _configs(
    [triton.Config({'BLOCK': blk}, num_warps=w) for blk in (256, 1024) for w in (4, 8)],
    triton.Config({'BLOCK': 256}))
_HEAD_CONFIGS = _configs(
    [triton.Config({'BLOCK_H': bh}, num_warps=w) for bh in (8, 32) for w in (1, 4)],
    triton.Config({'BLOCK_H': 4}))


@triton.jit
def _pick(d, ptr0, ptr1):
    """The pointer of direction ``d`` (0 or 1)."""
    ptr = ptr0
    if d > 0:
        ptr = ptr1
    return ptr


@triton.jit
def _scan_positions(c, d, seqlen, rev_bits, Q: tl.constexpr):
    """Token positions (in input order) of the Q scan steps of chunk ``c``, and their mask."""
    i = c * Q + tl.arange(0, Q)
    rev = (rev_bits >> d) & 1
    return i + rev * (seqlen - 1 - 2 * i), i < seqlen


@triton.jit
def _program_head(pid, batch, nheads, heads_per_group):
    """Direction, batch row (int64), head and its B / C group of a (direction, batch, head)
    program id."""
    h = pid % nheads
    return pid // (batch * nheads), ((pid // nheads) % batch).to(tl.int64), h, h // heads_per_group


@triton.jit
def _load_group_rows(ptr0, ptr1, d, b, g, pos, n, mask, s_b, s_l, s_g, s_n):
    """(Q, BLOCK_N) tile of B or C of direction ``d``: rows ``pos`` of batch ``b``, group ``g``,
    state columns ``n``; zeros where ``mask`` is off."""
    ptr = _pick(d, ptr0, ptr1)
    return tl.load(ptr + b * s_b + pos[:, None] * s_l + g * s_g + n[None, :] * s_n, mask=mask,
                   other=0.0)


# _sigmoid, _sum, _cumsum and tl.full stand in for tl.sigmoid, tl.sum, tl.cumsum and tl.zeros,
# @jit functions of triton.language: decorated when triton is imported, they only run in the
# interpreter if TRITON_INTERPRET=1 was set before that import, whereas these follow this module.
# The builtins tl.reduce / tl.associative_scan with triton's own add combiner compile like
# tl.sum / tl.cumsum, and the interpreter recognises that combiner and runs numpy's sum / cumsum.
@triton.jit
def _sigmoid(v):
    return 1.0 / (1.0 + tl.exp(-v))


@triton.jit
def _sum(v, axis):
    return tl.reduce(v, axis, tl.standard._sum_combine)


@triton.jit
def _cumsum(v, axis, reverse=False):
    return tl.associative_scan(v, axis, tl.standard._sum_combine, reverse=reverse)


@triton.jit
def _softplus(v):
    """torch.nn.functional.softplus with its threshold 20, in float32."""
    return tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))


@triton.jit
def _load_dy(dout_ptr, z0, z1, d, row_off, z_row_off, col_off, z_col_off, mask,
             HAS_Z: tl.constexpr):
    """dL/dy before the gate: dout * silu(z) (float32)."""
    dy = tl.load(dout_ptr + row_off + col_off, mask=mask, other=0.0).to(tl.float32)
    if HAS_Z:
        z_ptr = _pick(d, z0, z1)
        z = tl.load(z_ptr + z_row_off + z_col_off, mask=mask, other=0.0).to(tl.float32)
        dy = dy * z * _sigmoid(z)
    return dy


@triton.autotune(configs=_HEAD_CONFIGS, key=['nheads', 'Q'])
@triton.jit
def _dt_cumsum_fwd_kernel(
    dt0, dt1, A0, A1, bias0, bias1, dtp_ptr, acs_ptr,
    batch, seqlen, nheads, nchunks, rev_bits, dt_min, dt_max,
    s_dt_b, s_dt_l, s_dt_h,
    HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CLAMP: tl.constexpr,
    Q: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (ndir * B, nchunks, cdiv(H, BLOCK_H)): dt' and a = cumsum(dt' A) of one chunk."""
    pid_db = tl.program_id(0)
    c = tl.program_id(1)
    d = pid_db // batch
    b = pid_db % batch
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    h = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < nheads
    mask = valid[:, None] & h_mask[None, :]

    dt_ptr = _pick(d, dt0, dt1)
    v = tl.load(dt_ptr + b.to(tl.int64) * s_dt_b + pos[:, None] * s_dt_l + h[None, :] * s_dt_h,
                mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias_ptr = _pick(d, bias0, bias1)
        v += tl.load(bias_ptr + h, mask=h_mask, other=0.0).to(tl.float32)[None, :]
    if SOFTPLUS:
        v = _softplus(v)
    if CLAMP:
        v = tl.minimum(tl.maximum(v, dt_min), dt_max)
    v = tl.where(mask, v, 0.0)
    A_ptr = _pick(d, A0, A1)
    A = tl.load(A_ptr + h, mask=h_mask, other=0.0).to(tl.float32)
    acs = _cumsum(v * A[None, :], axis=0)

    row = (pid_db * nheads + h).to(tl.int64) * nchunks * Q + c * Q
    off = row[None, :] + tl.arange(0, Q)[:, None]
    tl.store(dtp_ptr + off, v, mask=h_mask[None, :])
    tl.store(acs_ptr + off, acs, mask=h_mask[None, :])


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_state_fwd_kernel(
    x0, x1, B0, B1, dtp_ptr, acs_ptr, states_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_b, s_x_l, s_x_h, s_x_p, s_B_b, s_B_l, s_B_g, s_B_n,
    Q: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): the chunk state
    S_c = sum_s exp(a_last - a_s) dt'_s x_s B_s^T into states_ptr (ndir, B, H, nchunks, P, N)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate

    x_ptr = _pick(d, x0, x1)
    xT = tl.load(x_ptr + b * s_x_b + pos[None, :] * s_x_l + h * s_x_h + p[:, None] * s_x_p,
                 mask=p_mask[:, None] & valid[None, :], other=0.0)  # (BLOCK_P, Q)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, valid[:, None] & n_mask[None, :],
                          s_B_b, s_B_l, s_B_g, s_B_n)  # (Q, BLOCK_N)
    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dtp = tl.load(dtp_ptr + chunk + tl.arange(0, Q))
    a = tl.load(acs_ptr + chunk + tl.arange(0, Q))
    a_last = tl.load(acs_ptr + chunk + Q - 1)
    weight = tl.exp(a_last - a) * dtp
    xw = (xT.to(tl.float32) * weight[None, :]).to(xT.dtype)
    state = tl.dot(xw, Bm, input_precision=DOT_PRECISION)  # (BLOCK_P, BLOCK_N)

    out = states_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], state,
             mask=p_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=_FLAT_CONFIGS, key=['hdim', 'dstate'], restore_value=['states_ptr'])
@triton.jit
def _state_passing_fwd_kernel(
    states_ptr, acs_ptr, init_ptr, final_ptr, nchunks, hdim, dstate,
    HAS_INIT: tl.constexpr, Q: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (ndir * B * H, cdiv(P * N, BLOCK)): replaces S_c by the incoming state H_c of chunk c.

    init_ptr and final_ptr are contiguous float32 (ndir, B, H, P, N): the state before the first
    chunk (read when HAS_INIT) and the state after the last one.
    """
    pid = tl.program_id(0)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    e_mask = e < hdim * dstate
    head_offset = pid.to(tl.int64) * hdim * dstate + e
    if HAS_INIT:
        state = tl.load(init_ptr + head_offset, mask=e_mask, other=0.0)
    else:
        state = tl.full((BLOCK,), 0.0, tl.float32)
    base = states_ptr + pid.to(tl.int64) * nchunks * hdim * dstate + e
    acs = acs_ptr + pid.to(tl.int64) * nchunks * Q + Q - 1
    for c in range(nchunks):
        chunk_state = tl.load(base + c * hdim * dstate, mask=e_mask, other=0.0)
        tl.store(base + c * hdim * dstate, state, mask=e_mask)
        state = tl.exp(tl.load(acs + c * Q)) * state + chunk_state
    tl.store(final_ptr + head_offset, state, mask=e_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_fwd_kernel(
    x0, x1, B0, B1, C0, C1, D0, D1, z0, z1, dtp_ptr, acs_ptr, states_ptr, y_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_b, s_x_l, s_x_h, s_x_p, s_B_b, s_B_l, s_B_g, s_B_n, s_C_b, s_C_l, s_C_g, s_C_n,
    s_D_h, s_D_p, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): y of one chunk, in input order, into
    y_ptr (ndir, B, L, H, P)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    t = tl.arange(0, Q)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate
    qp_mask = valid[:, None] & p_mask[None, :]
    qn_mask = valid[:, None] & n_mask[None, :]

    x_ptr = _pick(d, x0, x1)
    x = tl.load(x_ptr + b * s_x_b + pos[:, None] * s_x_l + h * s_x_h + p[None, :] * s_x_p,
                mask=qp_mask, other=0.0)  # (Q, BLOCK_P)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, qn_mask, s_B_b, s_B_l, s_B_g, s_B_n)
    Cm = _load_group_rows(C0, C1, d, b, g, pos, n, qn_mask, s_C_b, s_C_l, s_C_g, s_C_n)
    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dtp = tl.load(dtp_ptr + chunk + t)
    a = tl.load(acs_ptr + chunk + t)
    state_in = tl.load(states_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
                       + p[None, :] * dstate + n[:, None],
                       mask=n_mask[:, None] & p_mask[None, :], other=0.0)  # (BLOCK_N, BLOCK_P)

    y = tl.dot(Cm, state_in.to(x.dtype), input_precision=DOT_PRECISION) * tl.exp(a)[:, None]
    CB = tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION)  # (Q, Q): [t, s]
    decay = tl.exp(tl.where(t[:, None] >= t[None, :], a[:, None] - a[None, :], float('-inf')))
    mix = CB * decay * dtp[None, :]
    y += tl.dot(mix.to(x.dtype), x, input_precision=DOT_PRECISION)
    if HAS_D:
        D_ptr = _pick(d, D0, D1)
        y += x.to(tl.float32) * tl.load(D_ptr + h * s_D_h + p * s_D_p, mask=p_mask,
                                        other=0.0).to(tl.float32)[None, :]
    if HAS_Z:
        z_ptr = _pick(d, z0, z1)
        z = tl.load(z_ptr + b * s_z_b + pos[:, None] * s_z_l + h * s_z_h + p[None, :] * s_z_p,
                    mask=qp_mask, other=0.0).to(tl.float32)
        y = y * z * _sigmoid(z)
    y_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads * hdim + h * hdim
    tl.store(y_ptr + y_row[:, None] + p[None, :], y, mask=qp_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_dstate_bwd_kernel(
    C0, C1, z0, z1, dout_ptr, acs_ptr, dstates_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_C_b, s_C_l, s_C_g, s_C_n, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): sum_t exp(a_t) dy_t C_t^T, the part of
    dL/dH_c that chunk c's own outputs contribute, into dstates_ptr (ndir, B, H, nchunks, P, N)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate

    Cm = _load_group_rows(C0, C1, d, b, g, pos, n, valid[:, None] & n_mask[None, :],
                          s_C_b, s_C_l, s_C_g, s_C_n)  # (Q, BLOCK_N)
    y_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads * hdim + h * hdim
    dyT = _load_dy(dout_ptr, z0, z1, d, y_row[None, :], b * s_z_b + pos[None, :] * s_z_l
                   + h * s_z_h, p[:, None], p[:, None] * s_z_p,
                   p_mask[:, None] & valid[None, :], HAS_Z)  # (BLOCK_P, Q)
    a = tl.load(acs_ptr + pid.to(tl.int64) * nchunks * Q + c * Q + tl.arange(0, Q))
    dyT = (dyT * tl.exp(a)[None, :]).to(Cm.dtype)
    dstate_local = tl.dot(dyT, Cm, input_precision=DOT_PRECISION)
    out = dstates_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], dstate_local,
             mask=p_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=_FLAT_CONFIGS, key=['hdim', 'dstate'], restore_value=['dstates_ptr'])
@triton.jit
def _state_passing_bwd_kernel(
    dstates_ptr, states_ptr, acs_ptr, dfinal_ptr, dinit_ptr, dalast_ptr, nchunks, hdim, dstate,
    HAS_DFINAL: tl.constexpr, Q: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (ndir * B * H, cdiv(P * N, BLOCK)): reverse scan of dL/dH over chunks.

    Replaces the local part of chunk c in dstates_ptr by dL/dS_c (= dL/dH_{c+1}), writes dL/dH_0
    to dinit_ptr, reads dL/d(final state) from dfinal_ptr when HAS_DFINAL (both contiguous float32
    (ndir, B, H, P, N)) and writes, per chunk and block, exp(a_last) <dL/dH_{c+1}, H_c> to
    dalast_ptr (ndir, B, H, nchunks, cdiv(P * N, BLOCK)).
    """
    pid = tl.program_id(0)
    blk = tl.program_id(1)
    nblocks = tl.num_programs(1)
    e = blk * BLOCK + tl.arange(0, BLOCK)
    e_mask = e < hdim * dstate
    head_offset = pid.to(tl.int64) * hdim * dstate + e
    if HAS_DFINAL:
        grad = tl.load(dfinal_ptr + head_offset, mask=e_mask, other=0.0)
    else:
        grad = tl.full((BLOCK,), 0.0, tl.float32)
    offset = pid.to(tl.int64) * nchunks * hdim * dstate + e
    acs = acs_ptr + pid.to(tl.int64) * nchunks * Q + Q - 1
    for k in range(nchunks):
        c = nchunks - 1 - k
        local = tl.load(dstates_ptr + offset + c * hdim * dstate, mask=e_mask, other=0.0)
        state_in = tl.load(states_ptr + offset + c * hdim * dstate, mask=e_mask, other=0.0)
        tl.store(dstates_ptr + offset + c * hdim * dstate, grad, mask=e_mask)
        decay = tl.exp(tl.load(acs + c * Q))
        tl.store(dalast_ptr + (pid.to(tl.int64) * nchunks + c) * nblocks + blk,
                 decay * _sum(grad * state_in, axis=0))
        grad = decay * grad + local
    tl.store(dinit_ptr + head_offset, grad, mask=e_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_bwd_dx_kernel(
    x0, x1, B0, B1, C0, C1, D0, D1, z0, z1, dout_ptr,
    dtp_ptr, acs_ptr, states_ptr, dstates_ptr, dx_ptr, dz_ptr, dD_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_b, s_x_l, s_x_h, s_x_p, s_B_b, s_B_l, s_B_g, s_B_n, s_C_b, s_C_l, s_C_g, s_C_n,
    s_D_h, s_D_p, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): dx and dz of one chunk, in input order
    (ndir, B, L, H, P) float32, and the chunk's partial sum of dD (ndir, B, H, nchunks, P).

    dx_s = sum_{t>=s} (C_t.B_s) exp(a_t - a_s) dt'_s dy_t + exp(a_last - a_s) dt'_s dS B_s + D dy_s
    with dy = dout * silu(z) and dS = dL/dS_c; dz needs y before the gate, recomputed here.
    """
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    t = tl.arange(0, Q)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate
    qp_mask = valid[:, None] & p_mask[None, :]
    qn_mask = valid[:, None] & n_mask[None, :]

    x_ptr = _pick(d, x0, x1)
    x = tl.load(x_ptr + b * s_x_b + pos[:, None] * s_x_l + h * s_x_h + p[None, :] * s_x_p,
                mask=qp_mask, other=0.0)  # (Q, BLOCK_P)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, qn_mask, s_B_b, s_B_l, s_B_g, s_B_n)
    Cm = _load_group_rows(C0, C1, d, b, g, pos, n, qn_mask, s_C_b, s_C_l, s_C_g, s_C_n)
    dot_dtype = x.dtype
    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dtp = tl.load(dtp_ptr + chunk + t)
    a = tl.load(acs_ptr + chunk + t)
    a_last = tl.load(acs_ptr + chunk + Q - 1)
    state_off = ((pid.to(tl.int64) * nchunks + c) * hdim * dstate + p[None, :] * dstate
                 + n[:, None])
    pn_mask = n_mask[:, None] & p_mask[None, :]

    decay = tl.exp(tl.where(t[:, None] >= t[None, :], a[:, None] - a[None, :], float('-inf')))
    CB = tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION)  # (Q, Q): [t, s]
    mix = (CB * decay * dtp[None, :]).to(dot_dtype)
    if HAS_D:
        D_ptr = _pick(d, D0, D1)
        Dv = tl.load(D_ptr + h * s_D_h + p * s_D_p, mask=p_mask, other=0.0).to(tl.float32)

    y_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads * hdim + h * hdim
    y_off = y_row[:, None] + p[None, :]
    dout = tl.load(dout_ptr + y_off, mask=qp_mask, other=0.0).to(tl.float32)
    if HAS_Z:
        z_ptr = _pick(d, z0, z1)
        z = tl.load(z_ptr + b * s_z_b + pos[:, None] * s_z_l + h * s_z_h + p[None, :] * s_z_p,
                    mask=qp_mask, other=0.0).to(tl.float32)
        sig = _sigmoid(z)
        state_inT = tl.load(states_ptr + state_off, mask=pn_mask, other=0.0)  # H_c^T (N, P)
        y = tl.dot(Cm, state_inT.to(dot_dtype), input_precision=DOT_PRECISION) * tl.exp(a)[:, None]
        y += tl.dot(mix, x, input_precision=DOT_PRECISION)
        if HAS_D:
            y += x.to(tl.float32) * Dv[None, :]
        tl.store(dz_ptr + y_off, dout * y * sig * (1.0 + z * (1.0 - sig)), mask=qp_mask)
        dy = dout * z * sig
    else:
        dy = dout

    dST = tl.load(dstates_ptr + state_off, mask=pn_mask, other=0.0)  # dS^T (N, P)
    w = tl.exp(a_last - a) * dtp  # the chunk state's weight of token s
    dx = tl.dot(Bm, dST.to(dot_dtype), input_precision=DOT_PRECISION) * w[:, None]
    dx += tl.dot(tl.trans(mix), dy.to(dot_dtype), input_precision=DOT_PRECISION)
    if HAS_D:
        dx += dy * Dv[None, :]
        tl.store(dD_ptr + (pid.to(tl.int64) * nchunks + c) * hdim + p,
                 _sum(dy * x.to(tl.float32), axis=0), mask=p_mask)
    tl.store(dx_ptr + y_off, dx, mask=qp_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_bwd_dbc_kernel(
    x0, x1, dt0, dt1, A0, A1, B0, B1, C0, C1, z0, z1, bias0, bias1, dout_ptr,
    dtp_ptr, acs_ptr, states_ptr, dstates_ptr, dalast_ptr, dB_ptr, dC_ptr, ddt_ptr, dA_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits, dt_min, dt_max,
    s_x_b, s_x_l, s_x_h, s_x_p, s_dt_b, s_dt_l, s_dt_h,
    s_B_b, s_B_l, s_B_g, s_B_n, s_C_b, s_C_l, s_C_g, s_C_n, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CLAMP: tl.constexpr,
    Q: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks): per-head dB, dC (ndir, B, L, H, N) and dL/d(dt + dt_bias)
    (ndir, B, L, H) of one chunk in input order, float32, and its partial sum of dA
    (ndir, B, H, nchunks). The P axis is reduced in a loop of BLOCK_P columns.
    """
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    t = tl.arange(0, Q)
    n = tl.arange(0, BLOCK_N)
    n_mask = n < dstate
    qn_mask = valid[:, None] & n_mask[None, :]

    x_ptr = _pick(d, x0, x1)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, qn_mask, s_B_b, s_B_l, s_B_g, s_B_n)
    Cm = _load_group_rows(C0, C1, d, b, g, pos, n, qn_mask, s_C_b, s_C_l, s_C_g, s_C_n)
    dot_dtype = Bm.dtype
    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dtp = tl.load(dtp_ptr + chunk + t)
    a = tl.load(acs_ptr + chunk + t)
    a_last = tl.load(acs_ptr + chunk + Q - 1)

    # Contractions over P: dy x^T (Q, Q), x dS (Q, N) and dy H_c (Q, N).
    dyx = tl.full((Q, Q), 0.0, tl.float32)
    x_dS = tl.full((Q, BLOCK_N), 0.0, tl.float32)
    dy_state = tl.full((Q, BLOCK_N), 0.0, tl.float32)
    y_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads * hdim + h * hdim
    z_row = b * s_z_b + pos * s_z_l + h * s_z_h
    state_base = (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    for p0 in range(0, hdim, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        p_mask = p < hdim
        qp_mask = valid[:, None] & p_mask[None, :]
        pn_mask = p_mask[:, None] & n_mask[None, :]
        x = tl.load(x_ptr + b * s_x_b + pos[:, None] * s_x_l + h * s_x_h + p[None, :] * s_x_p,
                    mask=qp_mask, other=0.0)
        dy = _load_dy(dout_ptr, z0, z1, d, y_row[:, None], z_row[:, None], p[None, :],
                      p[None, :] * s_z_p, qp_mask, HAS_Z).to(dot_dtype)
        state_off = state_base + p[:, None] * dstate + n[None, :]
        state_in = tl.load(states_ptr + state_off, mask=pn_mask, other=0.0).to(dot_dtype)
        dS = tl.load(dstates_ptr + state_off, mask=pn_mask, other=0.0).to(dot_dtype)
        dyx += tl.dot(dy, tl.trans(x), input_precision=DOT_PRECISION)
        x_dS += tl.dot(x, dS, input_precision=DOT_PRECISION)
        dy_state += tl.dot(dy, state_in, input_precision=DOT_PRECISION)

    decay = tl.exp(tl.where(t[:, None] >= t[None, :], a[:, None] - a[None, :], float('-inf')))
    grad_mix = dyx * decay  # dL/d(CB_ts dt'_s) on the causal part
    grad_mix_dt = (grad_mix * dtp[None, :]).to(dot_dtype)
    decay_out = tl.exp(a_last - a)
    w = decay_out * dtp  # the chunk state's weight of token s
    exp_a = tl.exp(a)
    dC = tl.dot(grad_mix_dt, Bm, input_precision=DOT_PRECISION) + exp_a[:, None] * dy_state
    dB = tl.dot(tl.trans(grad_mix_dt), Cm, input_precision=DOT_PRECISION) + w[:, None] * x_dS
    bc_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads * dstate + h * dstate
    bc_off = bc_row[:, None] + n[None, :]
    tl.store(dB_ptr + bc_off, dB, mask=qn_mask)
    tl.store(dC_ptr + bc_off, dC, mask=qn_mask)

    # dL/da_t: the segment sum a_t - a_s enters with + for the row t and - for the column s.
    CB = tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION)
    grad_CB = grad_mix * CB
    grad_seg = grad_CB * dtp[None, :]
    dw = _sum(x_dS * Bm.to(tl.float32), axis=1)  # x_s^T dS B_s
    da = _sum(grad_seg, axis=1) - _sum(grad_seg, axis=0)
    da += exp_a * _sum(dy_state * Cm.to(tl.float32), axis=1) - w * dw
    da_last = _sum(w * dw, axis=0) + tl.load(dalast_ptr + pid.to(tl.int64) * nchunks + c)
    da += tl.where(t == Q - 1, da_last, 0.0)
    # a_t = sum_{k<=t} dt'_k A, so dL/d(dt'_k A) = sum_{t>=k} dL/da_t.
    ddA = _cumsum(da, axis=0, reverse=True)
    A_ptr = _pick(d, A0, A1)
    A = tl.load(A_ptr + h).to(tl.float32)
    tl.store(dA_ptr + pid.to(tl.int64) * nchunks + c, _sum(ddA * dtp, axis=0))
    ddtp = _sum(grad_CB, axis=0) + decay_out * dw + ddA * A

    dt_ptr = _pick(d, dt0, dt1)
    v = tl.load(dt_ptr + b * s_dt_b + pos * s_dt_l + h * s_dt_h, mask=valid,
                other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias_ptr = _pick(d, bias0, bias1)
        v += tl.load(bias_ptr + h).to(tl.float32)
    if SOFTPLUS:
        ddtp = ddtp * tl.where(v > 20.0, 1.0, _sigmoid(v))
        v = _softplus(v)
    if CLAMP:
        ddtp = tl.where((v >= dt_min) & (v <= dt_max), ddtp, 0.0)
    ddt_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads + h
    tl.store(ddt_ptr + ddt_row, ddtp, mask=valid)
