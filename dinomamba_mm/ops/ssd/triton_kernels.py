"""Triton kernels of the chunked SSD scan (Mamba-2 state space duality), forward and backward.

The stages and their names are those of ``chunk_stages.py`` (the PyTorch path; its docstring
defines them); ``triton_chunk.py`` launches these kernels, one Python function per stage. The
sequence is cut into chunks of Q tokens (Q is a compile-time block size, 16..32). Per direction d,
batch b, head h (group g = h // (H // G)), with s = dA_cumsum, the within-chunk inclusive running
sum of dt' A, and s_last its value at the chunk end:

Forward:
* ``_dA_cumsum_fwd_kernel``     dt' (bias, softplus, clamp) and s, per chunk.
* ``_chunk_state_fwd_kernel``   S_c = sum_j exp(s_last - s_j) dt'_j x_j B_j^T            (P x N).
* ``_state_passing_fwd_kernel`` H_c = exp(s_last[c-1]) H_{c-1} + S_{c-1}, H_0 = initial states
                                (a sequential loop over chunks, written over S in place).
* ``_chunk_scan_fwd_kernel``    y_t = sum_{j<=t} (C_t.B_j) exp(s_t - s_j) dt'_j x_j
                                      + exp(s_t) H_c C_t + D x_t, then * silu(z_t).
Backward:
* ``_chunk_scan_bwd_dstates_kernel``  the part of dL/dH_c that chunk c's outputs contribute.
* ``_state_passing_bwd_kernel``       the reverse scan of dL/dH over chunks, and dL/ds_last.
* ``_chunk_scan_chunk_state_bwd_dx_kernel``   dx (through the chunk scan and the chunk state),
                                              dz, partial dD; blocked over P.
* ``_chunk_scan_chunk_state_bwd_dbc_kernel``  dB, dC (per head), dL/d(dt') through the explicit
                                              dt' factors and ddA = dL/d(dt' A); a loop over P.
* ``_dA_cumsum_bwd_kernel``           dL/d(dt + dt_bias) and partial dA from ddA and dL/d(dt').
The two chunk kernels of the backward pass serve both the chunk scan and the chunk state: each
keeps its tiles in registers and reads x, B, C and dy once.

The decay gradient is summed without cancellation: step k enters the exponent s_t - s_j of the
pairs j < k <= t, so ddA_k takes the sum of their gradients over that rectangle (a running sum
down the columns, then a sum left of the diagonal), and the exclusive running sum of the chunk
state's terms; neither adds a term that another subtracts again (summing rows minus columns of the
same matrix and then a running sum over k loses about Q times more digits in float32).

Index conventions shared by every kernel:

* Direction is the slowest part of the first grid axis; per-direction inputs come as two pointers
  ``<name>0`` / ``<name>1`` with one set of strides (the wrapper makes the strides agree). A
  single-direction launch passes the same pointer twice and a grid with one direction.
* Reverse scans use index arithmetic: scan step i of direction d reads token
  ``i + rev * (L - 1 - 2 i)`` with ``rev = (rev_bits >> d) & 1``; chunks are cut in scan order,
  so the last chunk of a reverse scan ends at token 0. No flipped copies are made.
* Intermediates are contiguous, indexed by the scan order: dt', s, ddA, dL/d(dt'):
  (ndir, B, H, nchunks, Q), float32 except s, float64 (under strong decay |s| reaches thousands
  within a chunk, and a float32 difference s_t - s_j of two such sums is off by ~1e-3; exp() takes
  the difference in float32); chunk states: (ndir, B, H, nchunks, P, N) float32.
  Outputs written per token are in input order: (ndir, B, L, H, P) and (ndir, B, L, H, N).
* Masks come from differences of running sums (never products of exponentials) and are zeroed
  off the causal side after they are multiplied, so that a NaN or inf dt' reaches no earlier
  token; tokens past L have dt' = 0, so they neither decay nor inject and s_last is the sum up
  to the last real token. Where dt' is not finite, x enters no product (the running sums carry
  the NaN / inf to the later tokens, as the recurrence does).
* Matrix products accumulate in float32; operands are in the input dtype (fp16 / bf16 use tensor
  cores), fp32 inputs use ``DOT_PRECISION`` ('tf32' on GPU, see ``triton_chunk.py``).
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
def _exp(s):
    """exp of a float64 exponent (s, or a difference of two s), in float32."""
    return tl.exp(s.to(tl.float32))


@triton.jit
def _softplus(v):
    """torch.nn.functional.softplus with its threshold 20, in float32 (NaN stays NaN).

    log1p(e) as log(1 + e) * e / ((1 + e) - 1), exact to float32 where log(1 + e) alone loses
    the digits of a small e = exp(v) (Goldberg's identity; core triton.language has no log1p)."""
    e = tl.exp(tl.minimum(v, 20.0, propagate_nan=tl.PropagateNan.ALL))
    one_e = 1.0 + e
    return tl.where(v > 20.0, v, tl.where(one_e == 1.0, e, tl.log(one_e) * (e / (one_e - 1.0))))


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


@triton.jit
def _finite(v):
    """Whether v is neither NaN nor +-inf."""
    return tl.abs(v) < float('inf')


@triton.jit
def _preprocess_dt(d, dt_raw0, dt_raw1, bias0, bias1, b, pos, h, mask, h_mask, s_dt_b, s_dt_l,
                   s_dt_h, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    """dt + dt_bias (float32) of direction ``d`` at rows ``pos``, heads ``h`` (any shapes that
    broadcast), before softplus."""
    dt_ptr = _pick(d, dt_raw0, dt_raw1)
    v = tl.load(dt_ptr + b * s_dt_b + pos * s_dt_l + h * s_dt_h, mask=mask,
                other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias_ptr = _pick(d, bias0, bias1)
        v += tl.load(bias_ptr + h, mask=h_mask, other=0.0).to(tl.float32)
    return v


# ------------------------------------------------------------------------------ forward
@triton.autotune(configs=_HEAD_CONFIGS, key=['nheads', 'Q'])
@triton.jit
def _dA_cumsum_fwd_kernel(
    dt_raw0, dt_raw1, A0, A1, bias0, bias1, dt_ptr, dA_cumsum_ptr,
    batch, seqlen, nheads, nchunks, rev_bits, dt_min, dt_max,
    s_dt_b, s_dt_l, s_dt_h,
    HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CLAMP: tl.constexpr,
    Q: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (ndir * B, nchunks, cdiv(H, BLOCK_H)): dt' and s = running sum of dt' A of a chunk."""
    pid_db = tl.program_id(0)
    c = tl.program_id(1)
    d = pid_db // batch
    b = (pid_db % batch).to(tl.int64)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    h = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < nheads
    mask = valid[:, None] & h_mask[None, :]

    v = _preprocess_dt(d, dt_raw0, dt_raw1, bias0, bias1, b, pos[:, None], h[None, :], mask,
                       h_mask[None, :], s_dt_b, s_dt_l, s_dt_h, HAS_BIAS, SOFTPLUS)
    if SOFTPLUS:
        v = _softplus(v)
    if CLAMP:
        v = tl.minimum(tl.maximum(v, dt_min, propagate_nan=tl.PropagateNan.ALL), dt_max,
                       propagate_nan=tl.PropagateNan.ALL)
    v = tl.where(mask, v, 0.0)
    A_ptr = _pick(d, A0, A1)
    A = tl.load(A_ptr + h, mask=h_mask, other=0.0).to(tl.float32)
    dA_cs = _cumsum(v.to(tl.float64) * A[None, :].to(tl.float64), axis=0)

    row = (pid_db * nheads + h).to(tl.int64) * nchunks * Q + c * Q
    off = row[None, :] + tl.arange(0, Q)[:, None]
    tl.store(dt_ptr + off, v, mask=h_mask[None, :])
    tl.store(dA_cumsum_ptr + off, dA_cs, mask=h_mask[None, :])


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_state_fwd_kernel(
    x0, x1, B0, B1, dt_ptr, dA_cumsum_ptr, states_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_b, s_x_l, s_x_h, s_x_p, s_B_b, s_B_l, s_B_g, s_B_n,
    Q: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): the chunk state
    S_c = sum_j exp(s_last - s_j) dt'_j x_j B_j^T into states_ptr (ndir, B, H, nchunks, P, N)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate

    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dt = tl.load(dt_ptr + chunk + tl.arange(0, Q))
    dA_cs = tl.load(dA_cumsum_ptr + chunk + tl.arange(0, Q))
    dA_cs_last = tl.load(dA_cumsum_ptr + chunk + Q - 1)
    x_ptr = _pick(d, x0, x1)
    xT = tl.load(x_ptr + b * s_x_b + pos[None, :] * s_x_l + h * s_x_h + p[:, None] * s_x_p,
                 mask=p_mask[:, None] & (valid & _finite(dt))[None, :], other=0.0)  # (P, Q)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, valid[:, None] & n_mask[None, :],
                          s_B_b, s_B_l, s_B_g, s_B_n)  # (Q, BLOCK_N)
    weight = _exp(dA_cs_last - dA_cs) * dt
    xw = (xT.to(tl.float32) * weight[None, :]).to(xT.dtype)
    state = tl.dot(xw, Bm, input_precision=DOT_PRECISION)  # (BLOCK_P, BLOCK_N)

    out = states_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], state,
             mask=p_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=_FLAT_CONFIGS, key=['hdim', 'dstate'], restore_value=['states_ptr'])
@triton.jit
def _state_passing_fwd_kernel(
    states_ptr, dA_cumsum_ptr, init_ptr, final_ptr, nchunks, hdim, dstate,
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
    dA_cs_last = dA_cumsum_ptr + pid.to(tl.int64) * nchunks * Q + Q - 1
    for c in range(nchunks):
        chunk_state = tl.load(base + c * hdim * dstate, mask=e_mask, other=0.0)
        tl.store(base + c * hdim * dstate, state, mask=e_mask)
        state = _exp(tl.load(dA_cs_last + c * Q)) * state + chunk_state
    tl.store(final_ptr + head_offset, state, mask=e_mask)


@triton.jit
def _causal_mix(CB, dA_cs, dt, t):
    """(Q, Q) [t, j]: (C_t . B_j) exp(s_t - s_j) dt'_j for j <= t, exactly 0 elsewhere (also
    where the factors are NaN or inf)."""
    causal = t[:, None] >= t[None, :]
    decay = _exp(tl.where(causal, dA_cs[:, None] - dA_cs[None, :], float('-inf')))
    return tl.where(causal, CB * decay * dt[None, :], 0.0)


@triton.jit
def _mix_dot(mix, v, DOT_PRECISION: tl.constexpr):
    """mix @ v with the float32 (Q, Q) mix of :func:`_causal_mix` (or its transpose): operands in
    v's dtype, except fp16, whose range (65504) (C_t . B_j) dt'_j can exceed: fp16 tiles then go
    in as float32 with TF32 products, fp16's 10-bit mantissa and float32's range."""
    if v.dtype == tl.float16:
        return tl.dot(mix, v.to(tl.float32), input_precision='tf32')
    return tl.dot(mix.to(v.dtype), v, input_precision=DOT_PRECISION)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_fwd_kernel(
    x0, x1, B0, B1, C0, C1, D0, D1, z0, z1, dt_ptr, dA_cumsum_ptr, states_ptr, y_ptr,
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

    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dt = tl.load(dt_ptr + chunk + t)
    dA_cs = tl.load(dA_cumsum_ptr + chunk + t)
    x_ptr = _pick(d, x0, x1)
    x = tl.load(x_ptr + b * s_x_b + pos[:, None] * s_x_l + h * s_x_h + p[None, :] * s_x_p,
                mask=qp_mask & _finite(dt)[:, None], other=0.0)  # (Q, BLOCK_P)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, qn_mask, s_B_b, s_B_l, s_B_g, s_B_n)
    Cm = _load_group_rows(C0, C1, d, b, g, pos, n, qn_mask, s_C_b, s_C_l, s_C_g, s_C_n)
    state_in = tl.load(states_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
                       + p[None, :] * dstate + n[:, None],
                       mask=n_mask[:, None] & p_mask[None, :], other=0.0)  # (BLOCK_N, BLOCK_P)

    y = tl.dot(Cm, state_in.to(x.dtype), input_precision=DOT_PRECISION) * _exp(dA_cs)[:, None]
    CB = tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION)  # (Q, Q): [t, j]
    mix = _causal_mix(CB, dA_cs, dt, t)
    y += _mix_dot(mix, x, DOT_PRECISION)
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


# ------------------------------------------------------------------------------ backward
@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_bwd_dstates_kernel(
    C0, C1, z0, z1, dout_ptr, dA_cumsum_ptr, dstates_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_C_b, s_C_l, s_C_g, s_C_n, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): sum_t exp(s_t) dy_t C_t^T, the part of
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
    dA_cs = tl.load(dA_cumsum_ptr + pid.to(tl.int64) * nchunks * Q + c * Q + tl.arange(0, Q))
    dyT = (dyT * _exp(dA_cs)[None, :]).to(Cm.dtype)
    dstate_local = tl.dot(dyT, Cm, input_precision=DOT_PRECISION)
    out = dstates_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], dstate_local,
             mask=p_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=_FLAT_CONFIGS, key=['hdim', 'dstate'], restore_value=['dstates_ptr'])
@triton.jit
def _state_passing_bwd_kernel(
    dstates_ptr, states_ptr, dA_cumsum_ptr, dfinal_ptr, dinit_ptr, ddA_last_ptr, nchunks, hdim,
    dstate, HAS_DFINAL: tl.constexpr, Q: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (ndir * B * H, cdiv(P * N, BLOCK)): reverse scan of dL/dH over chunks.

    Replaces the local part of chunk c in dstates_ptr by dL/dS_c (= dL/dH_{c+1}), writes dL/dH_0
    to dinit_ptr, reads dL/d(final state) from dfinal_ptr when HAS_DFINAL (both contiguous float32
    (ndir, B, H, P, N)) and writes, per chunk and block, dL/ds_last = exp(s_last) <dL/dH_{c+1}, H_c>
    to ddA_last_ptr (ndir, B, H, nchunks, cdiv(P * N, BLOCK)).
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
    dA_cs_last = dA_cumsum_ptr + pid.to(tl.int64) * nchunks * Q + Q - 1
    for k in range(nchunks):
        c = nchunks - 1 - k
        local = tl.load(dstates_ptr + offset + c * hdim * dstate, mask=e_mask, other=0.0)
        state_in = tl.load(states_ptr + offset + c * hdim * dstate, mask=e_mask, other=0.0)
        tl.store(dstates_ptr + offset + c * hdim * dstate, grad, mask=e_mask)
        decay = _exp(tl.load(dA_cs_last + c * Q))
        tl.store(ddA_last_ptr + (pid.to(tl.int64) * nchunks + c) * nblocks + blk,
                 decay * _sum(grad * state_in, axis=0))
        grad = decay * grad + local
    tl.store(dinit_ptr + head_offset, grad, mask=e_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_chunk_state_bwd_dx_kernel(
    x0, x1, B0, B1, C0, C1, D0, D1, z0, z1, dout_ptr,
    dt_ptr, dA_cumsum_ptr, states_ptr, dstates_ptr, dx_ptr, dz_ptr, dD_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_b, s_x_l, s_x_h, s_x_p, s_B_b, s_B_l, s_B_g, s_B_n, s_C_b, s_C_l, s_C_g, s_C_n,
    s_D_h, s_D_p, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks, cdiv(P, BLOCK_P)): dx and dz of one chunk, in input order
    (ndir, B, L, H, P) float32, and the chunk's partial sum of dD (ndir, B, H, nchunks, P).

    dx_j = sum_{t>=j} (C_t.B_j) exp(s_t - s_j) dt'_j dy_t + exp(s_last - s_j) dt'_j dS B_j + D dy_j
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

    chunk = pid.to(tl.int64) * nchunks * Q + c * Q
    dt = tl.load(dt_ptr + chunk + t)
    dA_cs = tl.load(dA_cumsum_ptr + chunk + t)
    dA_cs_last = tl.load(dA_cumsum_ptr + chunk + Q - 1)
    x_ptr = _pick(d, x0, x1)
    x = tl.load(x_ptr + b * s_x_b + pos[:, None] * s_x_l + h * s_x_h + p[None, :] * s_x_p,
                mask=qp_mask, other=0.0)  # (Q, BLOCK_P)
    Bm = _load_group_rows(B0, B1, d, b, g, pos, n, qn_mask, s_B_b, s_B_l, s_B_g, s_B_n)
    Cm = _load_group_rows(C0, C1, d, b, g, pos, n, qn_mask, s_C_b, s_C_l, s_C_g, s_C_n)
    dot_dtype = x.dtype
    state_off = ((pid.to(tl.int64) * nchunks + c) * hdim * dstate + p[None, :] * dstate
                 + n[:, None])
    pn_mask = n_mask[:, None] & p_mask[None, :]

    CB = tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION)  # (Q, Q): [t, j]
    mix = _causal_mix(CB, dA_cs, dt, t)
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
        y = tl.dot(Cm, state_inT.to(dot_dtype), input_precision=DOT_PRECISION) * \
            _exp(dA_cs)[:, None]
        x_in = tl.where(_finite(dt)[:, None], x, 0.0)  # as the forward pass read it
        y += _mix_dot(mix, x_in, DOT_PRECISION)
        if HAS_D:
            y += x_in.to(tl.float32) * Dv[None, :]
        tl.store(dz_ptr + y_off, dout * y * sig * (1.0 + z * (1.0 - sig)), mask=qp_mask)
        dy = dout * z * sig
    else:
        dy = dout

    dST = tl.load(dstates_ptr + state_off, mask=pn_mask, other=0.0)  # dS^T (N, P)
    w = _exp(dA_cs_last - dA_cs) * dt  # the chunk state's weight of token j
    dx = tl.dot(Bm, dST.to(dot_dtype), input_precision=DOT_PRECISION) * w[:, None]
    dx += _mix_dot(tl.trans(mix), dy.to(dot_dtype), DOT_PRECISION)
    if HAS_D:
        dx += dy * Dv[None, :]
        tl.store(dD_ptr + (pid.to(tl.int64) * nchunks + c) * hdim + p,
                 _sum(dy * x.to(tl.float32), axis=0), mask=p_mask)
    tl.store(dx_ptr + y_off, dx, mask=qp_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_chunk_state_bwd_dbc_kernel(
    x0, x1, B0, B1, C0, C1, z0, z1, dout_ptr,
    dt_ptr, dA_cumsum_ptr, states_ptr, dstates_ptr, ddA_last_ptr, dB_ptr, dC_ptr, ddt_ptr,
    ddA_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_b, s_x_l, s_x_h, s_x_p, s_B_b, s_B_l, s_B_g, s_B_n, s_C_b, s_C_l, s_C_g, s_C_n,
    s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """Grid (ndir * B * H, nchunks): per-head dB, dC (ndir, B, L, H, N) of one chunk in input
    order, and in scan order (ndir, B, H, nchunks, Q): dL/d(dt') through the explicit dt' factors
    (ddt_ptr) and ddA = dL/d(dt' A) (ddA_ptr), float32. The P axis is reduced in a loop of
    BLOCK_P columns.
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
    dt = tl.load(dt_ptr + chunk + t)
    dA_cs = tl.load(dA_cumsum_ptr + chunk + t)
    dA_cs_last = tl.load(dA_cumsum_ptr + chunk + Q - 1)

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

    causal = t[:, None] >= t[None, :]
    decay = _exp(tl.where(causal, dA_cs[:, None] - dA_cs[None, :], float('-inf')))
    grad_mix = tl.where(causal, dyx * decay, 0.0)  # dL/d(CB_tj dt'_j) on the causal part
    grad_mix_dt = (grad_mix * dt[None, :]).to(dot_dtype)
    decay_out = _exp(dA_cs_last - dA_cs)
    w = decay_out * dt  # the chunk state's weight of token j
    exp_dA_cs = _exp(dA_cs)
    dC = tl.dot(grad_mix_dt, Bm, input_precision=DOT_PRECISION) + exp_dA_cs[:, None] * dy_state
    dB = tl.dot(tl.trans(grad_mix_dt), Cm, input_precision=DOT_PRECISION) + w[:, None] * x_dS
    bc_row = ((d * batch + b) * seqlen + pos).to(tl.int64) * nheads * dstate + h * dstate
    bc_off = bc_row[:, None] + n[None, :]
    tl.store(dB_ptr + bc_off, dB, mask=qn_mask)
    tl.store(dC_ptr + bc_off, dC, mask=qn_mask)

    CB = tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION)
    grad_CB = grad_mix * CB
    dw = _sum(x_dS * Bm.to(tl.float32), axis=1)  # x_j^T dS B_j
    # step k enters s_t - s_j for j < k <= t: ddA_k = the sum of the exponents' gradients
    # G_tj = grad_CB_tj dt'_j over that rectangle, as column sums from row k down, left of k
    below = _cumsum(tl.where(t[:, None] > t[None, :], grad_CB * dt[None, :], 0.0), axis=0,
                    reverse=True)
    ddA = _sum(tl.where(t[:, None] > t[None, :], below, 0.0), axis=1)
    # the chunk state: s_last - s_j holds step k for j < k (an exclusive running sum of T_j)
    T = w * dw
    ddA += _sum(tl.where(t[:, None] > t[None, :], T[None, :], 0.0), axis=1)
    # exp(s_t) dy_t . C_t H_c depends on every step up to t, the exit's decay on all of them
    ds_off = exp_dA_cs * _sum(dy_state * Cm.to(tl.float32), axis=1)
    ddA += _cumsum(ds_off, axis=0, reverse=True) + tl.load(ddA_last_ptr
                                                          + pid.to(tl.int64) * nchunks + c)
    tl.store(ddA_ptr + chunk + t, ddA)
    tl.store(ddt_ptr + chunk + t, _sum(grad_CB, axis=0) + decay_out * dw)


@triton.autotune(configs=_HEAD_CONFIGS, key=['nheads', 'Q'])
@triton.jit
def _dA_cumsum_bwd_kernel(
    dt_raw0, dt_raw1, A0, A1, bias0, bias1, dt_ptr, ddA_ptr, ddt_ptr, ddt_raw_ptr, dA_ptr,
    batch, seqlen, nheads, nchunks, rev_bits, dt_min, dt_max,
    s_dt_b, s_dt_l, s_dt_h,
    HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CLAMP: tl.constexpr,
    Q: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (ndir * B, nchunks, cdiv(H, BLOCK_H)): from ddA = dL/d(dt' A) and dL/d(dt') of the
    other stages (scan order), dL/d(dt + dt_bias) in input order (ndir, B, L, H) and the chunk's
    partial sums of dA (ndir, B, H, nchunks)."""
    pid_db = tl.program_id(0)
    c = tl.program_id(1)
    d = pid_db // batch
    b = (pid_db % batch).to(tl.int64)
    pos, valid = _scan_positions(c, d, seqlen, rev_bits, Q)
    h = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < nheads
    mask = valid[:, None] & h_mask[None, :]

    row = (pid_db * nheads + h).to(tl.int64) * nchunks * Q + c * Q
    off = row[None, :] + tl.arange(0, Q)[:, None]
    dt = tl.load(dt_ptr + off, mask=h_mask[None, :], other=0.0)
    ddA = tl.load(ddA_ptr + off, mask=h_mask[None, :], other=0.0)
    ddt = tl.load(ddt_ptr + off, mask=h_mask[None, :], other=0.0)
    A_ptr = _pick(d, A0, A1)
    A = tl.load(A_ptr + h, mask=h_mask, other=0.0).to(tl.float32)
    tl.store(dA_ptr + (pid_db * nheads + h).to(tl.int64) * nchunks + c,
             _sum(ddA * dt, axis=0), mask=h_mask)

    ddt += ddA * A[None, :]
    v = _preprocess_dt(d, dt_raw0, dt_raw1, bias0, bias1, b, pos[:, None], h[None, :], mask,
                       h_mask[None, :], s_dt_b, s_dt_l, s_dt_h, HAS_BIAS, SOFTPLUS)
    if SOFTPLUS:
        ddt = ddt * tl.where(v > 20.0, 1.0, _sigmoid(v))
        v = _softplus(v)
    if CLAMP:
        ddt = tl.where((v >= dt_min) & (v <= dt_max), ddt, 0.0)
    out = ((d * batch + b) * seqlen + pos).to(tl.int64)[:, None] * nheads + h[None, :]
    tl.store(ddt_raw_ptr + out, ddt, mask=mask)
