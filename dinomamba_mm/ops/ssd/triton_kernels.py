"""Triton kernels of the chunked SSD scan (Mamba-2 state space duality), forward and backward.

The stages and their names are those of ``chunk_stages.py`` (the PyTorch path; its docstring
defines them); ``triton_chunk.py`` launches these kernels, one Python function per stage. The
sequence is cut into chunks of Q tokens (Q, a compile-time size, 16..256, is the chunk of the
state recurrence) and each chunk into tiles of T tokens (T = min(Q, 32)): the (Q, Q) blocks of a
chunk are handled as (T, T) tiles in loops, so that the registers a program needs do not grow
with Q. Per direction d, batch b, head h (group g = h // (H // G)), with s = dA_cumsum, the
within-chunk inclusive running sum of dt' A, and s_last its value at the chunk end:

Forward:
* ``_dA_cumsum_fwd_kernel``     dt' (bias, softplus, clamp) and s, per chunk.
* ``_chunk_state_fwd_kernel``   S_c = sum_j exp(s_last - s_j) dt'_j x_j B_j^T            (P x N).
* ``_state_passing_fwd_kernel`` H_c = exp(s_last[c-1]) H_{c-1} + S_{c-1}, H_0 = initial states
                                (a sequential loop over chunks, written over S in place).
* ``_chunk_cb_kernel``          CB_tj = C_t . B_j of every chunk, once per group (not per head):
                                every head of the group reads it.
* ``_chunk_scan_fwd_kernel``    y_t = sum_{j<=t} CB_tj exp(s_t - s_j) dt'_j x_j
                                      + exp(s_t) H_c C_t + D x_t, then * silu(z_t).
Backward (after dt', s, the states and CB are recomputed by the forward kernels):
* ``_chunk_scan_bwd_dstates_kernel``  the part of dL/dH_c that chunk c's outputs contribute.
* ``_state_passing_bwd_kernel``       the reverse scan of dL/dH over chunks, and dL/ds_last.
* ``_chunk_scan_chunk_state_bwd_dx_kernel``   dx (through the chunk scan and the chunk state),
                                              dz, partial dD; per head, tile and block of P.
* ``_chunk_scan_bwd_dcb_kernel``      dCB_tj = sum over the group's heads of dL/d(CB_tj), once per
                                      group, a (T, T) tile per program.
* ``_chunk_scan_bwd_ddA_kernel``      per head: the decay gradient of the diagonal blocks (the
                                      rectangle sums below) and dL/d(dt') through the CB dt' x
                                      products.
* ``_chunk_scan_chunk_state_bwd_dbc_kernel``  dB, dC per group (dCB B, dCB^T C and the state
                                              terms of the group's heads), and per head the
                                              per-token terms of the state products that
                                              ``_dA_cumsum_bwd_kernel`` sums.
* ``_dA_cumsum_bwd_kernel``           ddA = dL/d(dt' A) from its parts (running sums over the
                                      chunk), dL/d(dt + dt_bias) and partial dA.

The decay gradient is summed without cancellation: step k enters the exponent s_t - s_j of the
pairs j < k <= t, so ddA_k takes the sum of their gradients G_tj over that rectangle. Over tiles,
a tile pair (t in tile u, j in tile v < u) gives the steps of tile u the running sums (from the
end of the tile) of its row sums, the steps of tile v the sums left of them of its column sums,
and every step of the tiles between the tile pair's total; the diagonal tiles take the rectangle
within the tile (running sums down the columns, then a sum left of the diagonal). The chunk
state's terms enter as an exclusive running sum, the off-diagonal part's as a running sum from
the end. No term is added that another subtracts again (summing rows minus columns of the same
matrix and then a running sum over k loses about Q times more digits in float32).

Index conventions shared by every kernel:

* Per-direction inputs are one pointer each, to a stack of K directions with its own stride per
  axis: x, z (K, B, L, H, P), dt (K, B, L, H), B, C (K, B, L, G, N), A, dt_bias (K, H), D (K, H, P)
  (a per-head D has a P stride of 0); an input shared by the directions is an expanded view
  (stride 0 along K), read without a copy. The direction is the slowest part of the first grid
  axis.
* Reverse scans use index arithmetic: scan step i of direction d reads token
  ``i + rev * (L - 1 - 2 i)`` with ``rev = (rev_bits >> d) & 1``; chunks are cut in scan order,
  so the last chunk of a reverse scan ends at token 0. No flipped copies are made.
* Intermediates are contiguous, indexed by the scan order: dt', s, the ddA / ddt parts:
  (K, B, H, nchunks, Q), float32 except s, float64 (under strong decay |s| reaches thousands
  within a chunk, and a float32 difference s_t - s_j of two such sums is off by ~1e-3; exp() takes
  the difference in float32); chunk states (K, B, H, nchunks, P, N) float32; CB and dCB
  (K, B, G, nchunks, Q, Q) float32, of which only the tiles on and below the diagonal are written
  and read. Outputs written per token are in input order: (K, B, L, H, P) and (K, B, L, G, N).
* Masks come from differences of running sums (never products of exponentials) and are zeroed
  off the causal side after they are multiplied, so that a NaN or inf dt' reaches no earlier
  token; tokens past L have dt' = 0, so they neither decay nor inject and s_last is the sum up
  to the last real token. Where dt' is not finite, x enters no product (the running sums carry
  the NaN / inf to the later tokens, as the recurrence does). Tiles past L are skipped.
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
    [triton.Config({'BLOCK_H': bh}, num_warps=w) for bh in (2, 8) for w in (2, 4)],
    triton.Config({'BLOCK_H': 4}))
_WARP_CONFIGS = _configs(
    [triton.Config({}, num_warps=w, num_stages=s) for w in (2, 4) for s in (1, 2)],
    triton.Config({}))


@triton.jit
def _tile(c, m, d, seqlen, rev_bits, Q: tl.constexpr, T: tl.constexpr):
    """Tile ``m`` of chunk ``c`` of direction ``d``: its in-chunk steps k (T of them, m T ...),
    their token positions in input order and whether they exist (scan step < L)."""
    k = m * T + tl.arange(0, T)
    i = c * Q + k
    rev = (rev_bits >> d) & 1
    return k, i + rev * (seqlen - 1 - 2 * i), i < seqlen


@triton.jit
def _tiles_in_chunk(c, seqlen, Q: tl.constexpr, T: tl.constexpr):
    """How many tiles of chunk ``c`` hold tokens."""
    return (tl.minimum(seqlen - c * Q, Q) + T - 1) // T


@triton.jit
def _program_head(pid, batch, nheads, heads_per_group):
    """Direction, batch row (both int64), head and its B / C group of a (direction, batch, head)
    program id."""
    h = pid % nheads
    d = (pid // (batch * nheads)).to(tl.int64)
    return d, ((pid // nheads) % batch).to(tl.int64), h, h // heads_per_group


@triton.jit
def _program_group(pid, batch, ngroups):
    """Direction, batch row (both int64) and group of a (direction, batch, group) program id."""
    return ((pid // (batch * ngroups)).to(tl.int64), ((pid // ngroups) % batch).to(tl.int64),
            pid % ngroups)


@triton.jit
def _scan_row(head_row, c, nchunks, Q: tl.constexpr):
    """Offset of chunk ``c`` of (direction, batch, head) row ``head_row`` in the scan layout."""
    return head_row.to(tl.int64) * nchunks * Q + c * Q


@triton.jit
def _offsets(d, b, pos, h, col, s_k, s_b, s_l, s_h, s_c):
    """(rows, cols) element offsets of a (K, B, L, H or G, P or N) tensor: direction ``d``, batch
    ``b``, tokens ``pos``, head or group ``h``, columns ``col``."""
    return d * s_k + b * s_b + pos[:, None] * s_l + h * s_h + col[None, :] * s_c


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
def _finite(v):
    """Whether v is neither NaN nor +-inf."""
    return tl.abs(v) < float('inf')


@triton.jit
def _load_dy(dout_ptr, z_ptr, dy_off, z_off, mask, HAS_Z: tl.constexpr):
    """dL/dy before the gate: dout * silu(z) (float32)."""
    dy = tl.load(dout_ptr + dy_off, mask=mask, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + z_off, mask=mask, other=0.0).to(tl.float32)
        dy = dy * z * _sigmoid(z)
    return dy


@triton.jit
def _preprocess_dt(dt_raw_ptr, bias_ptr, d, b, pos, h, mask, h_mask, s_dt_k, s_dt_b, s_dt_l,
                   s_dt_h, s_bias_k, s_bias_h, HAS_BIAS: tl.constexpr):
    """dt + dt_bias (float32) of direction ``d``, batch row ``b`` at rows ``pos``, heads ``h``
    (any shapes that broadcast), before softplus."""
    v = tl.load(dt_raw_ptr + d * s_dt_k + b * s_dt_b + pos * s_dt_l + h * s_dt_h, mask=mask,
                other=0.0).to(tl.float32)
    if HAS_BIAS:
        v += tl.load(bias_ptr + d * s_bias_k + h * s_bias_h, mask=h_mask,
                     other=0.0).to(tl.float32)
    return v


@triton.jit
def _causal_decay(v, s_rows, s_cols, k_rows, k_cols):
    """v_tj exp(s_t - s_j) for steps j <= t (k: in-chunk steps), exactly 0 elsewhere (also where
    v or the exponent is NaN or inf)."""
    causal = k_rows[:, None] >= k_cols[None, :]
    decay = _exp(tl.where(causal, s_rows[:, None] - s_cols[None, :], float('-inf')))
    return tl.where(causal, v * decay, 0.0)


@triton.jit
def _mix_dot(mix, v, DOT_PRECISION: tl.constexpr):
    """mix @ v with a float32 (T, T) mix (CB dt' with decays, or a gradient of it): operands in
    v's dtype, except fp16, whose range (65504) (C_t . B_j) dt'_j can exceed: fp16 tiles then go
    in as float32 with TF32 products, fp16's 10-bit mantissa and float32's range."""
    if v.dtype == tl.float16:
        return tl.dot(mix, v.to(tl.float32), input_precision='tf32')
    return tl.dot(mix.to(v.dtype), v, input_precision=DOT_PRECISION)


@triton.jit
def _cb_tile(cb_ptr, k_rows, k_cols, Q: tl.constexpr):
    """(T, T) tile of a chunk's (Q, Q) CB or dCB at in-chunk steps ``k_rows`` x ``k_cols``."""
    return tl.load(cb_ptr + k_rows[:, None] * Q + k_cols[None, :])


# ------------------------------------------------------------------------------ forward
@triton.autotune(configs=_HEAD_CONFIGS, key=['nheads', 'Q'])
@triton.jit
def _dA_cumsum_fwd_kernel(
    dt_raw_ptr, A_ptr, bias_ptr, dt_ptr, dA_cumsum_ptr,
    batch, seqlen, nheads, nchunks, rev_bits, dt_min, dt_max,
    s_dt_k, s_dt_b, s_dt_l, s_dt_h, s_A_k, s_A_h, s_bias_k, s_bias_h,
    HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CLAMP: tl.constexpr,
    Q: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (K * B, nchunks, cdiv(H, BLOCK_H)): dt' and s = running sum of dt' A of a chunk."""
    pid_db = tl.program_id(0)
    c = tl.program_id(1)
    d = (pid_db // batch).to(tl.int64)
    b = (pid_db % batch).to(tl.int64)
    k, pos, valid = _tile(c, 0, d, seqlen, rev_bits, Q, Q)
    h = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < nheads
    mask = valid[:, None] & h_mask[None, :]

    v = _preprocess_dt(dt_raw_ptr, bias_ptr, d, b, pos[:, None], h[None, :], mask,
                       h_mask[None, :], s_dt_k, s_dt_b, s_dt_l, s_dt_h, s_bias_k, s_bias_h,
                       HAS_BIAS)
    if SOFTPLUS:
        v = _softplus(v)
    if CLAMP:
        v = tl.minimum(tl.maximum(v, dt_min, propagate_nan=tl.PropagateNan.ALL), dt_max,
                       propagate_nan=tl.PropagateNan.ALL)
    v = tl.where(mask, v, 0.0)
    A = tl.load(A_ptr + d * s_A_k + h * s_A_h, mask=h_mask, other=0.0).to(tl.float32)
    dA_cs = _cumsum(v.to(tl.float64) * A[None, :].to(tl.float64), axis=0)

    off = _scan_row(pid_db * nheads + h, c, nchunks, Q)[None, :] + k[:, None]
    tl.store(dt_ptr + off, v, mask=h_mask[None, :])
    tl.store(dA_cumsum_ptr + off, dA_cs, mask=h_mask[None, :])


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_state_fwd_kernel(
    x_ptr, B_ptr, dt_ptr, dA_cumsum_ptr, states_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n,
    Q: tl.constexpr, T: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """Grid (K * B * H, nchunks, cdiv(P, BLOCK_P)): the chunk state
    S_c = sum_j exp(s_last - s_j) dt'_j x_j B_j^T into states_ptr (K, B, H, nchunks, P, N),
    summed over the chunk's tiles."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate

    row = _scan_row(pid, c, nchunks, Q)
    dA_cs_last = tl.load(dA_cumsum_ptr + row + Q - 1)
    state = tl.full((BLOCK_P, BLOCK_N), 0.0, tl.float32)
    for m in range(0, _tiles_in_chunk(c, seqlen, Q, T)):
        k, pos, valid = _tile(c, m, d, seqlen, rev_bits, Q, T)
        dt = tl.load(dt_ptr + row + k)
        dA_cs = tl.load(dA_cumsum_ptr + row + k)
        x = tl.load(x_ptr + _offsets(d, b, pos, h, p, s_x_k, s_x_b, s_x_l, s_x_h, s_x_p),
                    mask=(valid & _finite(dt))[:, None] & p_mask[None, :], other=0.0)
        Bm = tl.load(B_ptr + _offsets(d, b, pos, g, n, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n),
                     mask=valid[:, None] & n_mask[None, :], other=0.0)
        weight = _exp(dA_cs_last - dA_cs) * dt
        xw = (x.to(tl.float32) * weight[:, None]).to(x.dtype)
        state += tl.dot(tl.trans(xw), Bm, input_precision=DOT_PRECISION)

    out = states_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], state,
             mask=p_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=_FLAT_CONFIGS, key=['hdim', 'dstate'], restore_value=['states_ptr'])
@triton.jit
def _state_passing_fwd_kernel(
    states_ptr, dA_cumsum_ptr, init_ptr, final_ptr, nchunks, hdim, dstate,
    HAS_INIT: tl.constexpr, Q: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (K * B * H, cdiv(P * N, BLOCK)): replaces S_c by the incoming state H_c of chunk c.

    init_ptr and final_ptr are contiguous float32 (K, B, H, P, N): the state before the first
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


@triton.autotune(configs=_WARP_CONFIGS, key=['dstate', 'Q'])
@triton.jit
def _chunk_cb_kernel(
    B_ptr, C_ptr, CB_ptr,
    batch, seqlen, ngroups, nchunks, dstate, rev_bits,
    s_B_k, s_B_b, s_B_l, s_B_g, s_B_n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n,
    Q: tl.constexpr, T: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Grid (K * B * G, nchunks * Q / T): row tile m of CB_tj = C_t . B_j (float32) of a chunk,
    the tiles j <= t, into CB_ptr (K, B, G, nchunks, Q, Q)."""
    pid = tl.program_id(0)
    c = tl.program_id(1) // (Q // T)
    m = tl.program_id(1) % (Q // T)
    if c * Q + m * T >= seqlen:
        return
    d, b, g = _program_group(pid, batch, ngroups)
    n = tl.arange(0, BLOCK_N)
    n_mask = n < dstate
    k_t, pos_t, valid_t = _tile(c, m, d, seqlen, rev_bits, Q, T)
    Cm = tl.load(C_ptr + _offsets(d, b, pos_t, g, n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n),
                 mask=valid_t[:, None] & n_mask[None, :], other=0.0)
    out = CB_ptr + (pid.to(tl.int64) * nchunks + c) * Q * Q + k_t[:, None] * Q
    for v in range(0, m + 1):
        k_j, pos_j, valid_j = _tile(c, v, d, seqlen, rev_bits, Q, T)
        Bm = tl.load(B_ptr + _offsets(d, b, pos_j, g, n, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n),
                     mask=valid_j[:, None] & n_mask[None, :], other=0.0)
        tl.store(out + k_j[None, :], tl.dot(Cm, tl.trans(Bm), input_precision=DOT_PRECISION))


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_fwd_kernel(
    x_ptr, C_ptr, D_ptr, z_ptr, CB_ptr, dt_ptr, dA_cumsum_ptr, states_ptr, y_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n,
    s_D_k, s_D_h, s_D_p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (K * B * H, nchunks * Q / T, cdiv(P, BLOCK_P)): y of one tile of a chunk, in input
    order, into y_ptr (K, B, L, H, P); the tile's row of CB tiles in a loop."""
    pid = tl.program_id(0)
    c = tl.program_id(1) // (Q // T)
    m = tl.program_id(1) % (Q // T)
    if c * Q + m * T >= seqlen:
        return
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    k_t, pos_t, valid_t = _tile(c, m, d, seqlen, rev_bits, Q, T)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate
    tp_mask = valid_t[:, None] & p_mask[None, :]

    row = _scan_row(pid, c, nchunks, Q)
    dA_cs_t = tl.load(dA_cumsum_ptr + row + k_t)
    Cm = tl.load(C_ptr + _offsets(d, b, pos_t, g, n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n),
                 mask=valid_t[:, None] & n_mask[None, :], other=0.0)
    state_in = tl.load(states_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
                       + p[None, :] * dstate + n[:, None],
                       mask=n_mask[:, None] & p_mask[None, :], other=0.0)  # (BLOCK_N, BLOCK_P)
    y = tl.dot(Cm, state_in.to(Cm.dtype), input_precision=DOT_PRECISION) * \
        _exp(dA_cs_t)[:, None]

    cb = CB_ptr + ((d * batch + b) * (nheads // heads_per_group) + g) * nchunks * Q * Q \
        + c * Q * Q
    for v in range(0, m + 1):
        k_j, pos_j, valid_j = _tile(c, v, d, seqlen, rev_bits, Q, T)
        dt_j = tl.load(dt_ptr + row + k_j)
        x_j = tl.load(x_ptr + _offsets(d, b, pos_j, h, p, s_x_k, s_x_b, s_x_l, s_x_h, s_x_p),
                      mask=(valid_j & _finite(dt_j))[:, None] & p_mask[None, :], other=0.0)
        mix = _causal_decay(_cb_tile(cb, k_t, k_j, Q) * dt_j[None, :], dA_cs_t,
                            tl.load(dA_cumsum_ptr + row + k_j), k_t, k_j)
        y += _mix_dot(mix, x_j, DOT_PRECISION)
    if HAS_D:
        dt_t = tl.load(dt_ptr + row + k_t)
        x_t = tl.load(x_ptr + _offsets(d, b, pos_t, h, p, s_x_k, s_x_b, s_x_l, s_x_h, s_x_p),
                      mask=tp_mask & _finite(dt_t)[:, None], other=0.0)
        y += x_t.to(tl.float32) * tl.load(D_ptr + d * s_D_k + h * s_D_h + p * s_D_p,
                                          mask=p_mask, other=0.0).to(tl.float32)[None, :]
    if HAS_Z:
        z = tl.load(z_ptr + _offsets(d, b, pos_t, h, p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p),
                    mask=tp_mask, other=0.0).to(tl.float32)
        y = y * z * _sigmoid(z)
    y_row = ((d * batch + b) * seqlen + pos_t) * nheads * hdim + h * hdim
    tl.store(y_ptr + y_row[:, None] + p[None, :], y, mask=tp_mask)


# ------------------------------------------------------------------------------ backward
@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_bwd_dstates_kernel(
    C_ptr, z_ptr, dout_ptr, dA_cumsum_ptr, dstates_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_C_k, s_C_b, s_C_l, s_C_g, s_C_n, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
    s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (K * B * H, nchunks, cdiv(P, BLOCK_P)): sum_t exp(s_t) dy_t C_t^T, the part of
    dL/dH_c that chunk c's own outputs contribute, into dstates_ptr (K, B, H, nchunks, P, N)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate

    row = _scan_row(pid, c, nchunks, Q)
    dstate_local = tl.full((BLOCK_P, BLOCK_N), 0.0, tl.float32)
    for m in range(0, _tiles_in_chunk(c, seqlen, Q, T)):
        k, pos, valid = _tile(c, m, d, seqlen, rev_bits, Q, T)
        Cm = tl.load(C_ptr + _offsets(d, b, pos, g, n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n),
                     mask=valid[:, None] & n_mask[None, :], other=0.0)  # (T, BLOCK_N)
        dy = _load_dy(dout_ptr, z_ptr,
                      _offsets(d, b, pos, h, p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p),
                      _offsets(d, b, pos, h, p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p),
                      valid[:, None] & p_mask[None, :], HAS_Z)  # (T, BLOCK_P)
        dy = (dy * _exp(tl.load(dA_cumsum_ptr + row + k))[:, None]).to(Cm.dtype)
        dstate_local += tl.dot(tl.trans(dy), Cm, input_precision=DOT_PRECISION)
    out = dstates_ptr + (pid.to(tl.int64) * nchunks + c) * hdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], dstate_local,
             mask=p_mask[:, None] & n_mask[None, :])


@triton.autotune(configs=_FLAT_CONFIGS, key=['hdim', 'dstate'], restore_value=['dstates_ptr'])
@triton.jit
def _state_passing_bwd_kernel(
    dstates_ptr, states_ptr, dA_cumsum_ptr, dfinal_ptr, dinit_ptr, ddA_last_ptr, nchunks, hdim,
    dstate, HAS_DFINAL: tl.constexpr, Q: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (K * B * H, cdiv(P * N, BLOCK)): reverse scan of dL/dH over chunks.

    Replaces the local part of chunk c in dstates_ptr by dL/dS_c (= dL/dH_{c+1}), writes dL/dH_0
    to dinit_ptr, reads dL/d(final state) from dfinal_ptr when HAS_DFINAL (both contiguous float32
    (K, B, H, P, N)) and writes, per chunk and block, dL/ds_last = exp(s_last) <dL/dH_{c+1}, H_c>
    to ddA_last_ptr (K, B, H, nchunks, cdiv(P * N, BLOCK)).
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
    x_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dout_ptr, CB_ptr,
    dt_ptr, dA_cumsum_ptr, states_ptr, dstates_ptr, dx_ptr, dz_ptr, dD_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n,
    s_C_k, s_C_b, s_C_l, s_C_g, s_C_n, s_D_k, s_D_h, s_D_p,
    s_z_k, s_z_b, s_z_l, s_z_h, s_z_p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (K * B * H, nchunks * Q / T, cdiv(P, BLOCK_P)): dx and dz of one tile, in input
    order (K, B, L, H, P) float32, and the tile's partial sum of dD (K, B, H, nchunks * Q / T, P).

    dx_j = sum_{t>=j} CB_tj exp(s_t - s_j) dt'_j dy_t + exp(s_last - s_j) dt'_j dS B_j + D dy_j
    with dy = dout * silu(z) and dS = dL/dS_c (the tiles t >= j in a loop); dz needs y before the
    gate, recomputed here (the tiles before it in a loop).
    """
    pid = tl.program_id(0)
    c = tl.program_id(1) // (Q // T)
    m = tl.program_id(1) % (Q // T)
    if c * Q + m * T >= seqlen:
        return
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    k_j, pos_j, valid_j = _tile(c, m, d, seqlen, rev_bits, Q, T)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    p_mask = p < hdim
    n_mask = n < dstate
    jp_mask = valid_j[:, None] & p_mask[None, :]
    jn_mask = valid_j[:, None] & n_mask[None, :]
    pn_mask = n_mask[:, None] & p_mask[None, :]

    row = _scan_row(pid, c, nchunks, Q)
    dt_j = tl.load(dt_ptr + row + k_j)
    dA_cs_j = tl.load(dA_cumsum_ptr + row + k_j)
    x_off = _offsets(d, b, pos_j, h, p, s_x_k, s_x_b, s_x_l, s_x_h, s_x_p)
    state_off = (pid.to(tl.int64) * nchunks + c) * hdim * dstate + p[None, :] * dstate \
        + n[:, None]
    cb = CB_ptr + ((d * batch + b) * (nheads // heads_per_group) + g) * nchunks * Q * Q \
        + c * Q * Q
    if HAS_D:
        Dv = tl.load(D_ptr + d * s_D_k + h * s_D_h + p * s_D_p, mask=p_mask,
                     other=0.0).to(tl.float32)

    dy = tl.load(dout_ptr + _offsets(d, b, pos_j, h, p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p),
                 mask=jp_mask, other=0.0).to(tl.float32)
    if HAS_Z:  # y before the gate, for dz: the entering state, then the tiles up to this one
        Cm = tl.load(C_ptr + _offsets(d, b, pos_j, g, n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n),
                     mask=jn_mask, other=0.0)
        state_inT = tl.load(states_ptr + state_off, mask=pn_mask, other=0.0)  # H_c^T (N, P)
        y = tl.dot(Cm, state_inT.to(Cm.dtype), input_precision=DOT_PRECISION) * \
            _exp(dA_cs_j)[:, None]
        for v in range(0, m + 1):
            k_i, pos_i, valid_i = _tile(c, v, d, seqlen, rev_bits, Q, T)
            dt_i = tl.load(dt_ptr + row + k_i)
            x_i = tl.load(x_ptr + _offsets(d, b, pos_i, h, p, s_x_k, s_x_b, s_x_l, s_x_h,
                                           s_x_p),
                          mask=(valid_i & _finite(dt_i))[:, None] & p_mask[None, :], other=0.0)
            mix = _causal_decay(_cb_tile(cb, k_j, k_i, Q) * dt_i[None, :], dA_cs_j,
                                tl.load(dA_cumsum_ptr + row + k_i), k_j, k_i)
            y += _mix_dot(mix, x_i, DOT_PRECISION)
        if HAS_D:  # x as the forward pass read it
            y += tl.load(x_ptr + x_off, mask=jp_mask & _finite(dt_j)[:, None],
                         other=0.0).to(tl.float32) * Dv[None, :]
        z = tl.load(z_ptr + _offsets(d, b, pos_j, h, p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p),
                    mask=jp_mask, other=0.0).to(tl.float32)
        sig = _sigmoid(z)
        dz_off = ((d * batch + b) * seqlen + pos_j) * nheads * hdim + h * hdim
        tl.store(dz_ptr + dz_off[:, None] + p[None, :], dy * y * sig * (1.0 + z * (1.0 - sig)),
                 mask=jp_mask)
        dy = dy * z * sig

    if HAS_D:
        x = tl.load(x_ptr + x_off, mask=jp_mask, other=0.0).to(tl.float32)
        tl.store(dD_ptr + (pid.to(tl.int64) * nchunks * (Q // T) + tl.program_id(1)) * hdim + p,
                 _sum(dy * x, axis=0), mask=p_mask)
        dx = dy * Dv[None, :]
    else:
        dx = tl.full((T, BLOCK_P), 0.0, tl.float32)
    Bm = tl.load(B_ptr + _offsets(d, b, pos_j, g, n, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n),
                 mask=jn_mask, other=0.0)
    dST = tl.load(dstates_ptr + state_off, mask=pn_mask, other=0.0)  # dS^T (N, P)
    w = _exp(tl.load(dA_cumsum_ptr + row + Q - 1) - dA_cs_j) * dt_j  # chunk state's weight
    dx += tl.dot(Bm, dST.to(Bm.dtype), input_precision=DOT_PRECISION) * w[:, None]
    for u in range(m, _tiles_in_chunk(c, seqlen, Q, T)):  # outputs t >= j
        k_t, pos_t, valid_t = _tile(c, u, d, seqlen, rev_bits, Q, T)
        dy_t = _load_dy(dout_ptr, z_ptr,
                        _offsets(d, b, pos_t, h, p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p),
                        _offsets(d, b, pos_t, h, p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p),
                        valid_t[:, None] & p_mask[None, :], HAS_Z)
        mix = _causal_decay(_cb_tile(cb, k_t, k_j, Q) * dt_j[None, :],
                            tl.load(dA_cumsum_ptr + row + k_t), dA_cs_j, k_t, k_j)
        dx += _mix_dot(tl.trans(mix), dy_t.to(Bm.dtype), DOT_PRECISION)
    dx_off = ((d * batch + b) * seqlen + pos_j) * nheads * hdim + h * hdim
    tl.store(dx_ptr + dx_off[:, None] + p[None, :], dx, mask=jp_mask)


@triton.jit
def _dyx_tile(x_ptr, z_ptr, dout_ptr, d, b, h, pos_t, valid_t, pos_j, valid_j, hdim,
              s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
              s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
              HAS_Z: tl.constexpr, T: tl.constexpr, DOT_PRECISION: tl.constexpr,
              BLOCK_P: tl.constexpr):
    """(T, T) tile dy_t . x_j of head h (dy = dout * silu(z)), over P in blocks of BLOCK_P."""
    dyx = tl.full((T, T), 0.0, tl.float32)
    for p0 in range(0, hdim, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        p_mask = p < hdim
        x = tl.load(x_ptr + _offsets(d, b, pos_j, h, p, s_x_k, s_x_b, s_x_l, s_x_h, s_x_p),
                    mask=valid_j[:, None] & p_mask[None, :], other=0.0)
        dy = _load_dy(dout_ptr, z_ptr,
                      _offsets(d, b, pos_t, h, p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p),
                      _offsets(d, b, pos_t, h, p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p),
                      valid_t[:, None] & p_mask[None, :], HAS_Z)
        dyx += tl.dot(dy.to(x.dtype), tl.trans(x), input_precision=DOT_PRECISION)
    return dyx


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'Q'])
@triton.jit
def _chunk_scan_bwd_dcb_kernel(
    x_ptr, z_ptr, dout_ptr, dt_ptr, dA_cumsum_ptr, dCB_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
    s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """Grid (K * B * G, nchunks, (Q / T)^2): tile (u, v), v <= u, of
    dCB_tj = sum over the group's heads of exp(s_t - s_j) dt'_j dy_t . x_j (j <= t), float32,
    into dCB_ptr (K, B, G, nchunks, Q, Q)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    u = tl.program_id(2) // (Q // T)
    v = tl.program_id(2) % (Q // T)
    if (v > u) | (c * Q + u * T >= seqlen):
        return
    ngroups = nheads // heads_per_group
    d, b, g = _program_group(pid, batch, ngroups)
    k_t, pos_t, valid_t = _tile(c, u, d, seqlen, rev_bits, Q, T)
    k_j, pos_j, valid_j = _tile(c, v, d, seqlen, rev_bits, Q, T)
    dcb = tl.full((T, T), 0.0, tl.float32)
    for hh in range(0, heads_per_group):
        h = g * heads_per_group + hh
        row = _scan_row((d * batch + b) * nheads + h, c, nchunks, Q)
        dyx = _dyx_tile(x_ptr, z_ptr, dout_ptr, d, b, h, pos_t, valid_t, pos_j, valid_j, hdim,
                        s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
                        s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p, HAS_Z, T, DOT_PRECISION,
                        BLOCK_P)
        dcb += _causal_decay(dyx * tl.load(dt_ptr + row + k_j)[None, :],
                             tl.load(dA_cumsum_ptr + row + k_t),
                             tl.load(dA_cumsum_ptr + row + k_j), k_t, k_j)
    out = dCB_ptr + (pid.to(tl.int64) * nchunks + c) * Q * Q
    tl.store(out + k_t[:, None] * Q + k_j[None, :], dcb)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'Q'])
@triton.jit
def _chunk_scan_bwd_ddA_kernel(
    x_ptr, z_ptr, dout_ptr, CB_ptr, dt_ptr, dA_cumsum_ptr, ddA_ptr, ddt_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
    s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """Grid (K * B * H, nchunks): in scan order (K, B, H, nchunks, Q), float32, the decay
    gradient of the chunk's diagonal blocks (ddA_ptr: at step k the sum of
    G_tj = CB_tj exp(s_t - s_j) dt'_j dy_t . x_j over j < k <= t) and dL/d(dt'_j) through the
    same products (ddt_ptr); the tile pairs (u, v), v <= u, in a loop (see the module
    docstring)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    d, b, h, g = _program_head(pid, batch, nheads, heads_per_group)
    row = _scan_row(pid, c, nchunks, Q)
    cb = CB_ptr + ((d * batch + b) * (nheads // heads_per_group) + g) * nchunks * Q * Q \
        + c * Q * Q
    tiles = _tiles_in_chunk(c, seqlen, Q, T)
    rows = tl.arange(0, Q // T)
    r = tl.arange(0, T)
    strictly_lower = r[:, None] > r[None, :]
    ddA = tl.full((Q // T, T), 0.0, tl.float32)
    for v in range(0, tiles):
        k_j, pos_j, valid_j = _tile(c, v, d, seqlen, rev_bits, Q, T)
        dt_j = tl.load(dt_ptr + row + k_j)
        dA_cs_j = tl.load(dA_cumsum_ptr + row + k_j)
        ddt = tl.full((T,), 0.0, tl.float32)
        for u in range(v, tiles):
            k_t, pos_t, valid_t = _tile(c, u, d, seqlen, rev_bits, Q, T)
            dyx = _dyx_tile(x_ptr, z_ptr, dout_ptr, d, b, h, pos_t, valid_t, pos_j, valid_j,
                            hdim, s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_z_k, s_z_b, s_z_l, s_z_h,
                            s_z_p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p, HAS_Z, T,
                            DOT_PRECISION, BLOCK_P)
            grad_CB = _causal_decay(dyx, tl.load(dA_cumsum_ptr + row + k_t), dA_cs_j, k_t,
                                    k_j) * _cb_tile(cb, k_t, k_j, Q)
            ddt += _sum(grad_CB, axis=0)
            G = grad_CB * dt_j[None, :]
            if u == v:
                # within the tile: column sums from row k down, left of k
                below = _cumsum(tl.where(strictly_lower, G, 0.0), axis=0, reverse=True)
                part = _sum(tl.where(strictly_lower, below, 0.0), axis=1)
                ddA += tl.where(rows[:, None] == u, part[None, :], 0.0)
            else:
                col_sums = _sum(G, axis=0)
                ddA += tl.where(rows[:, None] == u,
                                _cumsum(_sum(G, axis=1), axis=0, reverse=True)[None, :], 0.0)
                ddA += tl.where(rows[:, None] == v, _sum(tl.where(strictly_lower,
                                                                  col_sums[None, :], 0.0),
                                                         axis=1)[None, :], 0.0)
                ddA += tl.where((rows[:, None] > v) & (rows[:, None] < u),
                                _sum(col_sums, axis=0), 0.0)
        tl.store(ddt_ptr + row + k_j, ddt)
    tl.store(ddA_ptr + row + rows[:, None] * T + r[None, :], ddA)


@triton.jit
def _group_grad_tile(
    x_ptr, B_ptr, C_ptr, z_ptr, dout_ptr, dcb, dt_ptr, dA_cumsum_ptr, states_ptr, dstates_ptr,
    out_ptr, row_sums_ptr, d, b, g, c, m, batch, seqlen, nheads, heads_per_group, nchunks,
    hdim, dstate, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n,
    s_C_k, s_C_b, s_C_l, s_C_g, s_C_n, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
    s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
    FOR_B: tl.constexpr, HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """dC (or dB with FOR_B) of tile m of group g, written to out_ptr (K, B, L, G, N); and per
    head the row sums exp(s_t) dy_t H_c C_t (x_j dS B_j) to row_sums_ptr, scan layout."""
    ngroups = nheads // heads_per_group
    k_m, pos_m, valid_m = _tile(c, m, d, seqlen, rev_bits, Q, T)
    n = tl.arange(0, BLOCK_N)
    n_mask = n < dstate
    mn_mask = valid_m[:, None] & n_mask[None, :]
    if FOR_B:  # dB_j = sum_{t>=j} dCB_tj C_t + ...
        own = tl.load(B_ptr + _offsets(d, b, pos_m, g, n, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n),
                      mask=mn_mask, other=0.0)
        lo, hi = m, _tiles_in_chunk(c, seqlen, Q, T)
    else:  # dC_t = sum_{j<=t} dCB_tj B_j + ...
        own = tl.load(C_ptr + _offsets(d, b, pos_m, g, n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n),
                      mask=mn_mask, other=0.0)
        lo, hi = 0, m + 1
    dot_dtype = own.dtype

    grad = tl.full((T, BLOCK_N), 0.0, tl.float32)
    for v in range(lo, hi):
        k_v, pos_v, valid_v = _tile(c, v, d, seqlen, rev_bits, Q, T)
        v_mask = valid_v[:, None] & n_mask[None, :]
        if FOR_B:
            C_v = tl.load(C_ptr + _offsets(d, b, pos_v, g, n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n),
                          mask=v_mask, other=0.0)
            grad += _mix_dot(tl.trans(_cb_tile(dcb, k_v, k_m, Q)), C_v, DOT_PRECISION)
        else:
            B_v = tl.load(B_ptr + _offsets(d, b, pos_v, g, n, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n),
                          mask=v_mask, other=0.0)
            grad += _mix_dot(_cb_tile(dcb, k_m, k_v, Q), B_v, DOT_PRECISION)

    for hh in range(0, heads_per_group):
        h = g * heads_per_group + hh
        head_row = (d * batch + b) * nheads + h
        row = _scan_row(head_row, c, nchunks, Q)
        state_base = (head_row * nchunks + c) * hdim * dstate
        product = tl.full((T, BLOCK_N), 0.0, tl.float32)  # x dS (dy H_c)
        for p0 in range(0, hdim, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            p_mask = p < hdim
            mp_mask = valid_m[:, None] & p_mask[None, :]
            state_off = state_base + p[:, None] * dstate + n[None, :]
            pn_mask = p_mask[:, None] & n_mask[None, :]
            if FOR_B:
                rows = tl.load(x_ptr + _offsets(d, b, pos_m, h, p, s_x_k, s_x_b, s_x_l, s_x_h,
                                                s_x_p), mask=mp_mask, other=0.0)
                state = tl.load(dstates_ptr + state_off, mask=pn_mask, other=0.0)
            else:
                rows = _load_dy(dout_ptr, z_ptr,
                                _offsets(d, b, pos_m, h, p, s_dy_k, s_dy_b, s_dy_l, s_dy_h,
                                         s_dy_p),
                                _offsets(d, b, pos_m, h, p, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p),
                                mp_mask, HAS_Z)
                state = tl.load(states_ptr + state_off, mask=pn_mask, other=0.0)
            product += tl.dot(rows.to(dot_dtype), state.to(dot_dtype),
                              input_precision=DOT_PRECISION)
        dA_cs = tl.load(dA_cumsum_ptr + row + k_m)
        if FOR_B:  # the chunk state's weight of token j, and x_j dS B_j
            grad += (_exp(tl.load(dA_cumsum_ptr + row + Q - 1) - dA_cs)
                     * tl.load(dt_ptr + row + k_m))[:, None] * product
            tl.store(row_sums_ptr + row + k_m, _sum(product * own.to(tl.float32), axis=1))
        else:  # exp(s_t) dy_t H_c, and its product with C_t
            exp_dA_cs = _exp(dA_cs)
            grad += exp_dA_cs[:, None] * product
            tl.store(row_sums_ptr + row + k_m,
                     exp_dA_cs * _sum(product * own.to(tl.float32), axis=1))

    out = ((d * batch + b) * seqlen + pos_m) * ngroups * dstate + g * dstate
    tl.store(out_ptr + out[:, None] + n[None, :], grad, mask=mn_mask)


@triton.autotune(configs=_BLOCK_P_CONFIGS, key=['hdim', 'dstate', 'Q'])
@triton.jit
def _chunk_scan_chunk_state_bwd_dbc_kernel(
    x_ptr, B_ptr, C_ptr, z_ptr, dout_ptr, dCB_ptr,
    dt_ptr, dA_cumsum_ptr, states_ptr, dstates_ptr, dB_ptr, dC_ptr, dw_ptr, ds_off_ptr,
    batch, seqlen, nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
    s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_B_k, s_B_b, s_B_l, s_B_g, s_B_n,
    s_C_k, s_C_b, s_C_l, s_C_g, s_C_n, s_z_k, s_z_b, s_z_l, s_z_h, s_z_p,
    s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p,
    HAS_Z: tl.constexpr, Q: tl.constexpr, T: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Grid (K * B * G, nchunks * Q / T, 2): dC (third grid index 0) or dB (1) of one tile, per
    group, in input order (K, B, L, G, N) float32:

      dC_t = sum_{j<=t} dCB_tj B_j + sum_h exp(s_t) dy_t H_c
      dB_j = sum_{t>=j} dCB_tj C_t + sum_h exp(s_last - s_j) dt'_j x_j dS

    (h over the group's heads, H_c and dS = dL/dS_c of each head); and per head, in scan order,
    the per-token terms of the state products: exp(s_t) dy_t H_c C_t (ds_off_ptr) and
    x_j dS B_j (dw_ptr). The two halves share no tile, so a program holds one.
    """
    pid = tl.program_id(0)
    c = tl.program_id(1) // (Q // T)
    m = tl.program_id(1) % (Q // T)
    if c * Q + m * T >= seqlen:
        return
    d, b, g = _program_group(pid, batch, nheads // heads_per_group)
    dcb = dCB_ptr + (pid.to(tl.int64) * nchunks + c) * Q * Q
    for half in tl.static_range(2):  # 0: dC, 1: dB
        if tl.program_id(2) == half:
            _group_grad_tile(x_ptr, B_ptr, C_ptr, z_ptr, dout_ptr, dcb, dt_ptr, dA_cumsum_ptr,
                             states_ptr, dstates_ptr, dB_ptr if half else dC_ptr,
                             dw_ptr if half else ds_off_ptr, d, b, g, c, m, batch, seqlen,
                             nheads, heads_per_group, nchunks, hdim, dstate, rev_bits,
                             s_x_k, s_x_b, s_x_l, s_x_h, s_x_p, s_B_k, s_B_b, s_B_l, s_B_g,
                             s_B_n, s_C_k, s_C_b, s_C_l, s_C_g, s_C_n, s_z_k, s_z_b, s_z_l,
                             s_z_h, s_z_p, s_dy_k, s_dy_b, s_dy_l, s_dy_h, s_dy_p, half == 1,
                             HAS_Z, Q, T, BLOCK_N, DOT_PRECISION, BLOCK_P)


@triton.autotune(configs=_HEAD_CONFIGS, key=['nheads', 'Q'])
@triton.jit
def _dA_cumsum_bwd_kernel(
    dt_raw_ptr, A_ptr, bias_ptr, dt_ptr, dA_cumsum_ptr, ddA_diag_ptr, ddt_diag_ptr, dw_ptr,
    ds_off_ptr, ddA_last_ptr, ddt_raw_ptr, dA_ptr,
    batch, seqlen, nheads, nchunks, rev_bits, dt_min, dt_max,
    s_dt_k, s_dt_b, s_dt_l, s_dt_h, s_A_k, s_A_h, s_bias_k, s_bias_h,
    HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, CLAMP: tl.constexpr,
    Q: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (K * B, nchunks, cdiv(H, BLOCK_H)): from the parts of the other stages (scan order),
    ddA_k = dL/d(dt'_k A) = the diagonal blocks' rectangle sums + sum_{j<k} exp(s_last - s_j)
    dt'_j x_j dS B_j (the chunk state) + sum_{t>=k} exp(s_t) dy_t H_c C_t (the entering state)
    + dL/ds_last, and dL/d(dt'_j) = the diagonal blocks' + exp(s_last - s_j) x_j dS B_j + ddA_j A;
    then dL/d(dt + dt_bias) in input order (K, B, L, H) and the chunk's partial sums of dA
    (K, B, H, nchunks)."""
    pid_db = tl.program_id(0)
    c = tl.program_id(1)
    d = (pid_db // batch).to(tl.int64)
    b = (pid_db % batch).to(tl.int64)
    k, pos, valid = _tile(c, 0, d, seqlen, rev_bits, Q, Q)
    h = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < nheads
    mask = valid[:, None] & h_mask[None, :]
    after_first = mask & (k > 0)[:, None]

    head_row = pid_db * nheads + h
    row = _scan_row(head_row, c, nchunks, Q)
    off = row[None, :] + k[:, None]
    dt = tl.load(dt_ptr + off, mask=mask, other=0.0)
    dA_cs = tl.load(dA_cumsum_ptr + off, mask=mask, other=0.0)
    dA_cs_last = tl.load(dA_cumsum_ptr + row + Q - 1, mask=h_mask, other=0.0)[None, :]
    dw = tl.load(dw_ptr + off, mask=mask, other=0.0)
    # the chunk state's term of the step before (an exclusive running sum, without subtracting)
    chunk_state_before = tl.where(
        after_first, _exp(dA_cs_last - tl.load(dA_cumsum_ptr + off - 1, mask=after_first,
                                               other=0.0))
        * tl.load(dt_ptr + off - 1, mask=after_first, other=0.0)
        * tl.load(dw_ptr + off - 1, mask=after_first, other=0.0), 0.0)
    ddA = tl.load(ddA_diag_ptr + off, mask=mask, other=0.0) + _cumsum(chunk_state_before, axis=0)
    ddA += _cumsum(tl.load(ds_off_ptr + off, mask=mask, other=0.0), axis=0, reverse=True)
    ddA += tl.load(ddA_last_ptr + head_row.to(tl.int64) * nchunks + c, mask=h_mask,
                   other=0.0)[None, :]
    ddt = tl.load(ddt_diag_ptr + off, mask=mask, other=0.0) + \
        tl.where(mask, _exp(dA_cs_last - dA_cs) * dw, 0.0)
    A = tl.load(A_ptr + d * s_A_k + h * s_A_h, mask=h_mask, other=0.0).to(tl.float32)
    tl.store(dA_ptr + head_row.to(tl.int64) * nchunks + c, _sum(ddA * dt, axis=0), mask=h_mask)

    ddt += ddA * A[None, :]
    v = _preprocess_dt(dt_raw_ptr, bias_ptr, d, b, pos[:, None], h[None, :], mask,
                       h_mask[None, :], s_dt_k, s_dt_b, s_dt_l, s_dt_h, s_bias_k, s_bias_h,
                       HAS_BIAS)
    if SOFTPLUS:
        ddt = ddt * tl.where(v > 20.0, 1.0, _sigmoid(v))
        v = _softplus(v)
    if CLAMP:
        ddt = tl.where((v >= dt_min) & (v <= dt_max), ddt, 0.0)
    out = ((d * batch + b) * seqlen + pos)[:, None] * nheads + h[None, :]
    tl.store(ddt_raw_ptr + out, ddt, mask=mask)
