"""Bidirectional Mamba-2 (SSD) token mixer of DinoVim ("v2" bidirectionality of Vision Mamba)."""
import contextlib
import math
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from dinomamba_mm.argument_checks import (check_argument, check_bool, check_int, check_number,
                                          is_real_sequence)
from dinomamba_mm.ops.ssd import ssd_mixing_matrix, ssd_scan, ssd_scan_directions
from dinomamba_mm.registry import MODELS
from .depthwise_conv import depthwise_conv_silu
from .gated_rms_norm import GatedRMSNorm
from .token_mixer import Rows, depth_scaled_init_

#: keyword arguments of :func:`dinomamba_mm.ops.ssd.ssd_mixing_matrix` found in each direction's
#: dict returned by :meth:`BidirectionalMamba2Mixer.ssd_inputs`.
MIXING_MATRIX_KEYS = ('dt', 'A', 'B', 'C', 'dt_bias', 'dt_softplus', 'dt_limit', 'reverse')


class _Recipe:
    """How to rebuild one tensor: ``rebuild(source)``, kept once it ran (``value``)."""

    def __init__(self, rebuild: Callable[[object], torch.Tensor], source: object):
        self.rebuild, self.source, self.value = rebuild, source, None


class _RebuiltWhenRead:
    """Saved-tensor hooks under which autograd keeps a recipe instead of any tensor that views
    one of the given storages: the backward pass rebuilds that storage's tensor from its source
    (once) when it reads one of them. Every other tensor, and the sources, go through the hooks
    that were active before (activation checkpointing, offloading, ...), if any.

    Args:
        rebuilds (dict): ``{tensor.untyped_storage().data_ptr(): (rebuild, source)}``;
            ``rebuild(source)``, run without autograd, returns a tensor with the same storage
            layout.
    """

    def __init__(self, rebuilds: Dict[int, Tuple[Callable[[torch.Tensor], torch.Tensor],
                                                 torch.Tensor]]):
        # private: torch has no public way to read the active hooks (torch 2.11, 2.14; its own
        # compiler reads them so too); docs/faq.md, "Why does the Mamba-2 mixer call a private
        # torch function?"
        outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        self.outer_pack, self.outer_unpack = outer or (None, None)
        self.recipes = {ptr: _Recipe(rebuild, self._outer(source))
                        for ptr, (rebuild, source) in rebuilds.items()}

    def _outer(self, t: torch.Tensor):
        return t if self.outer_pack is None else self.outer_pack(t)

    def pack(self, t: torch.Tensor):
        recipe = self.recipes.get(t.untyped_storage().data_ptr())
        if recipe is None:
            return self._outer(t)
        return recipe, t.storage_offset(), t.shape, t.stride()

    def unpack(self, packed) -> torch.Tensor:
        if not (isinstance(packed, tuple) and packed and isinstance(packed[0], _Recipe)):
            return packed if self.outer_unpack is None else self.outer_unpack(packed)
        recipe, offset, shape, stride = packed
        if recipe.value is None:
            source = recipe.source
            if self.outer_unpack is not None:
                source = self.outer_unpack(source)
            with torch.no_grad():
                recipe.value = recipe.rebuild(source)
        return recipe.value.as_strided(shape, stride, offset)


def inverse_softplus_dt(num_heads: int, dt_min: float, dt_max: float,
                        dt_init_floor: float) -> torch.Tensor:
    """dt bias such that softplus(bias) is log-uniform in [dt_min, dt_max] (Mamba-2's init).

    Returns:
        (num_heads,) float32.
    """
    log_dt = torch.rand(num_heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
    dt = torch.exp(log_dt).clamp(min=dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))


@MODELS.register_module()
class BidirectionalMamba2Mixer(nn.Module):
    """Mamba-2 mixer scanning the token sequence in both directions (DinoVim's token mixer).

    One ``in_proj`` produces, per token, the gate z (d_inner), xBC (d_inner + 2 G N) and dt (H),
    in that order. Each direction has its own depthwise conv1d + SiLU over xBC, dt bias, A_log,
    D and gated RMSNorm; the forward conv is causal, the backward one anti-causal in input order
    (equal to a causal conv of the flipped sequence), and the backward scan runs from the last
    token to the first (``ssd_scan_directions`` with both directions stacked), so nothing is
    flipped. Output:
    ``out_proj((norm(y_fwd, z) + norm_b(y_bwd, z)) / 2)``.

    Parameter names follow the Dino-Mamba paper code (``conv1d_b``, ``dt_b_bias``, ``A_log_b``,
    ``D_b``, ``norm_b`` for the backward direction) so checkpoints map one to one.

    Without autograd, sequences longer than ``segment_len`` run in segments: the backward
    direction right to left, then the forward one left to right, each scan carrying its state
    from segment to segment (same result; the xBC and dt rows of in_proj run twice per token,
    but the per-block temporaries scale with the segment, not the sequence: they set the peak
    memory of high-resolution inference).

    A registered token mixer (:mod:`.token_mixer`): :meth:`mixing_matrix` gives the SSD matrix
    M of each direction and their average; :meth:`ssd_inputs` the per-direction scan inputs (x,
    dt, A, B, C after the convolution, D, dt_bias, ...) they are made of.

    The defaults are the paper's (DinoVim's arch names set ``d_state``, ``headdim``, ``expand``,
    ``ngroups``, ``d_conv`` and ``chunk_size`` to the same values).

    Args:
        embed_dims (int): Model width D.
        d_state (int): SSM state size N. Defaults to 64.
        d_conv (int): Depthwise convolution width. Defaults to 4.
        expand (int): d_inner = expand * D. Defaults to 2.
        headdim (int): Channels per head P; H = d_inner / P. Defaults to 64.
        ngroups (int): Groups G of B / C (H % G == 0); also the gated norm's groups.
            Defaults to 1.
        chunk_size (int): Chunk length of the SSD scan (see ``ssd_scan``: the torch backend
            uses it as given, the Triton kernels a power of two in [16, 64]; 64 suits both).
            Defaults to 64.
        A_init_range (Sequence[float]): A = -U(A_init_range) per head. Defaults to (1, 16).
        dt_min (float): softplus(dt_bias) is initialised log-uniform in [dt_min, dt_max],
            floored at dt_init_floor. Defaults to 0.001.
        dt_max (float): See dt_min. Defaults to 0.1.
        dt_init_floor (float): See dt_min. Defaults to 1e-4.
        dt_limit (Tuple[float, float]): Clamp of the effective step (no clamp for (0, inf)).
            Defaults to (0.0, inf).
        bias (bool): Bias in in_proj / out_proj. Defaults to False.
        conv_bias (bool): Bias in the conv1d layers. Defaults to True.
        norm_before_gate (bool): Gated norm order (False: rmsnorm(y * silu(z))).
            Defaults to False.
        norm_eps (float): Epsilon of the gated norms. Defaults to 1e-5.
        ssd_impl (str, optional): Implementation passed to the SSD op (None: its automatic
            choice). Defaults to None.
        segment_len (int, optional): Longest segment of the no-grad path (None: always the
            whole sequence). 512 cuts DinoVim-T's no-grad peak 2.5-3x at 768-1024 px, below
            ViT's, for ~20 % more forward time at 1025 tokens on CPU (docs/benchmarks.md); the
            dense-prediction configs set it. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 d_state: int = 64,
                 d_conv: int = 4,
                 expand: int = 2,
                 headdim: int = 64,
                 ngroups: int = 1,
                 chunk_size: int = 64,
                 A_init_range: Sequence[float] = (1, 16),
                 dt_min: float = 0.001,
                 dt_max: float = 0.1,
                 dt_init_floor: float = 1e-4,
                 dt_limit: Tuple[float, float] = (0.0, float('inf')),
                 bias: bool = False,
                 conv_bias: bool = True,
                 norm_before_gate: bool = False,
                 norm_eps: float = 1e-5,
                 ssd_impl: Optional[str] = None,
                 segment_len: Optional[int] = None) -> None:
        super().__init__()
        d_inner = expand * embed_dims
        if d_inner % headdim != 0:
            raise ValueError(f'expand * embed_dims = {d_inner} must be a multiple of headdim='
                             f'{headdim}')
        num_heads = d_inner // headdim
        if segment_len is not None:
            check_int('segment_len', segment_len, 1)
        if ngroups <= 0 or num_heads % ngroups != 0:
            raise ValueError(f'ngroups={ngroups} must divide the number of heads {num_heads}')
        check_argument('A_init_range', A_init_range,
                       'a (low, high) pair with 0 < low <= high < inf', is_real_sequence,
                       lambda v: len(v) == 2 and 0 < v[0] <= v[1] < math.inf)
        low, high = A_init_range
        check_argument('dt_limit', dt_limit,
                       'a (low, high) pair with 0 <= low <= high (high may be inf)',
                       is_real_sequence, lambda v: len(v) == 2 and 0 <= v[0] <= v[1])
        check_number('dt_init_floor', dt_init_floor, 0, exclusive_minimum=True)
        check_number('norm_eps', norm_eps, 0, exclusive_minimum=True)
        check_number('dt_min', dt_min, 0, exclusive_minimum=True)
        check_number('dt_max', dt_max, dt_min)
        for name, flag in (('bias', bias), ('conv_bias', conv_bias),
                           ('norm_before_gate', norm_before_gate)):
            check_bool(name, flag)
        self.embed_dims = embed_dims
        self.d_inner = d_inner
        self.d_state = d_state
        self.d_conv = d_conv
        self.headdim = headdim
        self.num_heads = num_heads
        self.ngroups = ngroups
        self.chunk_size = chunk_size
        self.dt_limit = tuple(dt_limit)
        self.ssd_impl = ssd_impl
        self.segment_len = segment_len

        self.conv_dim = conv_dim = d_inner + 2 * ngroups * d_state
        self.in_proj = nn.Linear(embed_dims, d_inner + conv_dim + num_heads, bias=bias)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, d_conv, groups=conv_dim, bias=conv_bias)
        self.conv1d_b = nn.Conv1d(conv_dim, conv_dim, d_conv, groups=conv_dim, bias=conv_bias)
        self.dt_bias = nn.Parameter(inverse_softplus_dt(num_heads, dt_min, dt_max, dt_init_floor))
        self.dt_b_bias = nn.Parameter(
            inverse_softplus_dt(num_heads, dt_min, dt_max, dt_init_floor))
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(low, high).log())
        self.A_log_b = nn.Parameter(torch.empty(num_heads).uniform_(low, high).log())
        self.D = nn.Parameter(torch.ones(num_heads))
        self.D_b = nn.Parameter(torch.ones(num_heads))
        for param in (self.dt_bias, self.dt_b_bias, self.A_log, self.A_log_b, self.D, self.D_b):
            param._no_weight_decay = True
        self.norm = GatedRMSNorm(d_inner, eps=norm_eps, group_size=d_inner // ngroups,
                                 norm_before_gate=norm_before_gate)
        self.norm_b = GatedRMSNorm(d_inner, eps=norm_eps, group_size=d_inner // ngroups,
                                   norm_before_gate=norm_before_gate)
        self.out_proj = nn.Linear(d_inner, embed_dims, bias=bias)

    def _conv(self, xbc: torch.Tensor, conv: nn.Conv1d, causal: bool) -> torch.Tensor:
        """Depthwise conv1d + SiLU of ``conv``'s weights, (B, L, C) -> (B, L, C); anti-causal
        (the causal conv of the flipped sequence, flipped back) when not ``causal``."""
        return depthwise_conv_silu(xbc, conv.weight[:, 0], conv.bias, causal)

    def _direction(self, backward: bool) -> Tuple[nn.Conv1d, torch.Tensor, torch.Tensor,
                                                  torch.Tensor, torch.Tensor]:
        """conv, A (H,) = -exp(A_log) in at least float32, D and dt_bias of one direction."""
        if backward:
            conv, a_log, d, dt_bias = self.conv1d_b, self.A_log_b, self.D_b, self.dt_b_bias
        else:
            conv, a_log, d, dt_bias = self.conv1d, self.A_log, self.D, self.dt_bias
        A = -torch.exp(a_log.to(torch.promote_types(a_log.dtype, torch.float32)))
        return conv, A, d, dt_bias

    def _split_xbc(self, xbc: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, L, d_inner + 2GN) -> x (B, L, H, P), B (B, L, G, N), C (B, L, G, N)."""
        gn = self.ngroups * self.d_state
        x, b, c = torch.split(xbc, [self.d_inner, gn, gn], dim=-1)
        return (x.unflatten(-1, (self.num_heads, self.headdim)),
                b.unflatten(-1, (self.ngroups, self.d_state)),
                c.unflatten(-1, (self.ngroups, self.d_state)))

    def _direction_inputs(self, xbc: torch.Tensor) -> Dict[str, torch.Tensor]:
        """x, A, B, C, D, dt_bias of both directions' scans, stacked along a first dimension
        of 2 (forward, backward), from in_proj's xbc (B, L, d_inner + 2GN): x, B, C are views of
        one (2, B, L, d_inner + 2GN) buffer holding both convolutions' outputs."""
        x, b, c = self._split_xbc(self._conv_both(xbc))
        A = torch.stack([-torch.exp(a_log.to(torch.promote_types(a_log.dtype, torch.float32)))
                         for a_log in (self.A_log, self.A_log_b)])
        return dict(x=x, A=A, B=b, C=c, D=torch.stack([self.D, self.D_b]),
                    dt_bias=torch.stack([self.dt_bias, self.dt_b_bias]))

    def _conv_both(self, xbc: torch.Tensor) -> torch.Tensor:
        """Both directions' depthwise conv1d + SiLU, (B, L, C) -> (2, B, L, C): the forward
        conv causal, the backward one anti-causal."""
        convs = (self.conv1d, self.conv1d_b)
        biases = None if self.conv1d.bias is None else torch.stack([c.bias for c in convs])
        return depthwise_conv_silu(xbc, torch.stack([c.weight[:, 0] for c in convs]), biases,
                                   causal=(True, False))

    def _project(self, u: torch.Tensor):
        """z (B, L, d_inner), xBC (B, L, d_inner + 2GN) and dt (B, L, H) of the mixer input u."""
        return torch.split(self.in_proj(u), [self.d_inner, self.conv_dim, self.num_heads],
                           dim=-1)

    def ssd_inputs(self, u: torch.Tensor) -> Dict[str, object]:
        """Per-direction inputs of the SSD scans for the mixer input ``u`` (for analysis).

        Args:
            u (torch.Tensor): (B, L, D) mixer input (the block's normalised tokens).

        Returns:
            ``{'forward': {...}, 'backward': {...}, 'z': z}`` with z (B, L, d_inner) the gate.
            Each direction's dict holds ``x`` (B, L, H, P), ``D`` (H,) and the keyword
            arguments of ``ssd_mixing_matrix`` (:data:`MIXING_MATRIX_KEYS`): ``dt`` (B, L, H)
            before bias / softplus, ``A`` (H,) = -exp(A_log), ``B`` / ``C`` (B, L, G, N) after
            the convolution and SiLU, ``dt_bias`` (H,), ``dt_softplus`` (True), ``dt_limit`` and
            ``reverse`` (False forward, True backward). All in input token order; the scan of a
            direction gives ``y = einsum('bhij,bjhp->bihp', M, x) + D * x`` before its gated norm.
        """
        z, xbc, dt = self._project(u)
        stacked = self._direction_inputs(xbc)
        options = dict(dt=dt, dt_softplus=True, dt_limit=self.dt_limit)
        per_direction = zip(*(t.unbind(0) for t in stacked.values()))
        forward, backward = (dict(zip(stacked, values), **options, reverse=reverse)
                             for values, reverse in zip(per_direction, (False, True)))
        return dict(forward=forward, backward=backward, z=z)

    def mixing_matrix(self, u: torch.Tensor, rows: Rows = None) -> Dict[str, torch.Tensor]:
        """The SSD matrices M of the input u (B, L, D), each (B, H, R, L) float32.

        Returns:
            ``{'forward': M_f, 'backward': M_b, 'combined': (M_f + M_b) / 2}``: per head and
            direction ``M_ij = C_i^T B_j dt_j exp(sum of dt A between j and i)``
            (``ssd_mixing_matrix`` of :meth:`ssd_inputs`), lower triangular forward, upper
            triangular backward; 'combined' is the average the mixer applies before its (per
            token) gated norms. The skip term D x and the fact that each direction sees its own
            convolution of x are not part of M.
        """
        inputs = self.ssd_inputs(u)
        matrices = OrderedDict()
        for name in ('forward', 'backward'):
            matrix = ssd_mixing_matrix(**{k: inputs[name][k] for k in MIXING_MATRIX_KEYS})
            matrices[name] = matrix if rows is None else matrix[:, :, rows]
        matrices['combined'] = (matrices['forward'] + matrices['backward']) / 2
        return matrices

    def init_residual_output(self, num_layers: int) -> None:
        """Depth-scaled initialisation of ``out_proj`` (:func:`.token_mixer.depth_scaled_init_`)."""
        depth_scaled_init_(self.out_proj, num_layers)

    def activation_elements(self, length: int) -> Tuple[int, int]:
        """A lower bound of the elements per sample of a forward over ``length`` tokens.

        Returns:
            (working, kept): in_proj's output and, per scan direction, its conv output, its
            output and the chunk scan's (Q x Q per chunk) products, over a segment when the
            forward runs in segments (no grad and ``segment_len``); and what autograd keeps for
            the backward pass: in_proj's output, both scans' outputs and out_proj's input.
        """
        segment = length if torch.is_grad_enabled() or not self.segment_len else min(
            length, self.segment_len)
        per_direction = self.conv_dim + self.d_inner + self.num_heads * min(self.chunk_size,
                                                                            segment)
        working = length * self.in_proj.out_features + 2 * segment * per_direction
        kept = length * (self.in_proj.out_features + 3 * self.d_inner)
        return working, kept

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """u: (B, L, D) -> (B, L, D)."""
        if (self.segment_len is not None and u.shape[1] > self.segment_len
                and not torch.is_grad_enabled()):
            return self._forward_in_segments(u)
        z, xbc, dt = self._project(u)
        y_fwd, y_bwd = self._scan(xbc, dt)
        y = (self.norm(y_fwd.flatten(-2), z) + self.norm_b(y_bwd.flatten(-2), z)).div_(2)
        return self.out_proj(y)

    def _scan(self, xbc: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """y (2, B, L, H, P) of both directions' scans (forward, backward) of in_proj's xbc and
        dt.

        For the backward pass the mixer keeps, besides its input, in_proj's output (z, xbc, dt),
        the scans' outputs (the gated norms' inputs) and out_proj's input: the convolutions keep
        their input view and recompute their pre-activation, the norms recompute from (y, z) and
        the scan from its inputs, and the convolved x, B, C that the scan keeps are rebuilt from
        xbc when its backward reads them, as mamba_ssm's fused mixer does.
        """
        inputs = self._direction_inputs(xbc)
        with self._rebuilt_when_read(xbc, inputs['x']):
            return ssd_scan_directions(
                dt=dt.expand(2, *dt.shape), **inputs, reverse=(False, True),
                chunk_size=self.chunk_size, dt_softplus=True, dt_limit=self.dt_limit,
                impl=self.ssd_impl)

    def _rebuilt_when_read(self, xbc: torch.Tensor, conv_output: torch.Tensor):
        """The context in which autograd keeps a recipe for the convolutions' output (any view
        of it) instead of the tensor."""
        if not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return contextlib.nullcontext()
        hooks = _RebuiltWhenRead(
            {conv_output.untyped_storage().data_ptr(): (self._conv_both, xbc)})
        return torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack)

    def _segments(self, length: int) -> List[Tuple[int, int]]:
        """[start, end) of balanced segments of at most ``segment_len`` tokens."""
        count = math.ceil(length / self.segment_len)
        size = math.ceil(length / count)
        return [(start, min(start + size, length)) for start in range(0, length, size)]

    def _forward_in_segments(self, u: torch.Tensor) -> torch.Tensor:
        """Same as the whole-sequence forward, without autograd, segment by segment.

        Only the input u (B, L, D) and one (B, L, d_inner) buffer span the sequence: the first
        pass (backward direction) projects its segments to xBC and dt only and stores y_bwd;
        the second projects them in full and mixes. Each segment's projection includes the
        K - 1 neighbouring tokens its convolution reads; each scan enters a segment with the
        state the previous segment in scan order left.
        """
        segments = self._segments(u.shape[1])
        mixed = None
        state = None
        for start, end in reversed(segments):
            _, y, state = self._scan_segment(u, start, end, backward=True, state=state)
            if mixed is None:
                mixed = y.new_empty(*u.shape[:-1], self.d_inner)
            mixed[:, start:end] = y
        state = None
        for start, end in segments:
            z, y, state = self._scan_segment(u, start, end, backward=False, state=state)
            both = self.norm(y, z)
            both += self.norm_b(mixed[:, start:end], z)
            mixed[:, start:end] = both
        return self.out_proj(mixed.div_(2))

    def _scan_segment(
        self, u: torch.Tensor, start: int, end: int, backward: bool,
        state: Optional[torch.Tensor]
    ) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Projection, one direction's conv and scan over tokens [start, end) of u (B, L, D).

        Args:
            u (torch.Tensor): (B, L, D) mixer input.
            start (int): First token of the segment.
            end (int): Token after the segment's last.
            backward (bool): Scan the backward direction (else the forward one).
            state (torch.Tensor, optional): (B, H, P, N) state entering the segment in scan
                order (None: zeros).

        Returns:
            the gate z (B, S, d_inner) (None for the backward direction, which projects only
            xBC and dt), y (B, S, d_inner) before the gated norm and the state leaving the
            segment; S = end - start.
        """
        conv, A, d, dt_bias = self._direction(backward)
        if backward:
            first, last = start, min(end + self.d_conv - 1, u.shape[1])
            rows = slice(self.d_inner, None)  # in_proj rows of xBC and dt
        else:
            first, last = max(start - self.d_conv + 1, 0), end
            rows = slice(None)
        bias = self.in_proj.bias[rows] if self.in_proj.bias is not None else None
        proj = F.linear(u[:, first:last], self.in_proj.weight[rows], bias)
        z_width = proj.shape[-1] - self.conv_dim - self.num_heads  # 0 backward, d_inner forward
        inside = slice(start - first, end - first)
        window = proj[..., z_width:z_width + self.conv_dim]
        x, b, c = self._split_xbc(self._conv(window, conv, causal=not backward)[:, inside])
        y, state = ssd_scan(
            x, proj[:, inside, -self.num_heads:], A, b, c,
            chunk_size=self.chunk_size, D=d, dt_bias=dt_bias, dt_softplus=True,
            dt_limit=self.dt_limit, initial_states=state, return_final_states=True,
            reverse=backward, impl=self.ssd_impl)
        z = proj[:, inside, :z_width] if z_width else None
        return z, y.flatten(-2), state

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, d_inner={self.d_inner}, heads={self.num_heads}, '
                f'headdim={self.headdim}, d_state={self.d_state}, ngroups={self.ngroups}, '
                f'd_conv={self.d_conv}, chunk_size={self.chunk_size}')
