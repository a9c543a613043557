"""BidirectionalMamba2Mixer vs an independent float64 per-token recurrence of the paper's block.

The oracle follows the paper code's definition literally: the backward direction runs the
FLIPPED sequence through a causal conv and a forward scan and flips the result back; the module
under test never flips (anti-causal conv, reverse scan).
"""
import math

import pytest
import torch

from dinomamba_mm.models.layers import MIXING_MATRIX_KEYS, BidirectionalMamba2Mixer


def _randomise(mixer: BidirectionalMamba2Mixer, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in mixer.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
        mixer.A_log.copy_(torch.rand(mixer.num_heads, generator=gen).mul(2).log1p())
        mixer.A_log_b.copy_(torch.rand(mixer.num_heads, generator=gen).mul(2).log1p())


def _causal_conv_silu(seq, weight, bias):
    """seq (L, C), weight (C, 1, K), bias (C,): out_t = silu(b + sum_k w_k seq_{t-K+1+k})."""
    length, channels = seq.shape
    width = weight.shape[-1]
    out = torch.zeros_like(seq)
    for t in range(length):
        for c in range(channels):
            acc = bias[c].item()
            for k in range(width):
                src = t - (width - 1) + k
                if src >= 0:
                    acc += weight[c, 0, k].item() * seq[src, c].item()
            out[t, c] = acc / (1 + math.exp(-acc))
    return out


def _scan(x, dt, a, b, c, d):
    """Sequential SSD: x (L,H,P), dt (L,H) after softplus, a (H,), b/c (L,G,N), d (H,)."""
    length, heads, headdim = x.shape
    groups, state = b.shape[1:]
    y = torch.zeros_like(x)
    for h in range(heads):
        g = h // (heads // groups)
        hstate = torch.zeros(headdim, state, dtype=x.dtype)
        for t in range(length):
            hstate = math.exp(dt[t, h].item() * a[h].item()) * hstate + \
                dt[t, h] * torch.outer(x[t, h], b[t, g])
            y[t, h] = hstate @ c[t, g] + d[h] * x[t, h]
    return y


def _gated_norm(y, z, weight, group_size, eps):
    gated = y * z / (1 + torch.exp(-z))
    groups = gated.reshape(*gated.shape[:-1], -1, group_size)
    rms = torch.sqrt((groups**2).mean(-1, keepdim=True) + eps)
    return (groups / rms).reshape(gated.shape) * weight


def _paper_block(mixer: BidirectionalMamba2Mixer, u: torch.Tensor):
    """float64 oracle for one sequence u (L, D). Returns (out, y_fwd, y_bwd) before gating."""
    p = {k: v.detach().double() for k, v in mixer.state_dict().items()}
    di, n, g, heads = mixer.d_inner, mixer.d_state, mixer.ngroups, mixer.num_heads
    zxbcdt = u @ p['in_proj.weight'].T
    z, xbc, dt = zxbcdt[:, :di], zxbcdt[:, di:2 * di + 2 * g * n], zxbcdt[:, -heads:]

    def direction(seq_xbc, seq_dt, conv_w, conv_b, dt_bias, a_log, d):
        conv = _causal_conv_silu(seq_xbc, conv_w, conv_b)
        x = conv[:, :di].reshape(-1, heads, mixer.headdim)
        b = conv[:, di:di + g * n].reshape(-1, g, n)
        c = conv[:, di + g * n:].reshape(-1, g, n)
        dtp = torch.nn.functional.softplus(seq_dt + dt_bias)
        return _scan(x, dtp, -torch.exp(a_log), b, c, d).reshape(-1, di)

    y_fwd = direction(xbc, dt, p['conv1d.weight'], p['conv1d.bias'], p['dt_bias'],
                      p['A_log'], p['D'])
    y_bwd = direction(xbc.flip(0), dt.flip(0), p['conv1d_b.weight'], p['conv1d_b.bias'],
                      p['dt_b_bias'], p['A_log_b'], p['D_b']).flip(0)
    group_size = di // g
    mixed = (_gated_norm(y_fwd, z, p['norm.weight'], group_size, 1e-5)
             + _gated_norm(y_bwd, z, p['norm_b.weight'], group_size, 1e-5)) / 2
    return mixed @ p['out_proj.weight'].T, y_fwd, y_bwd


@pytest.mark.parametrize('ngroups', [1, 2])
def test_mixer_matches_float64_recurrence(ngroups):
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(8, d_state=4, d_conv=3, expand=2, headdim=4,
                                     ngroups=ngroups, chunk_size=4)
    _randomise(mixer, seed=ngroups)
    u = torch.randn(2, 11, 8)  # L = 11: three chunks of 4, the last one partial
    out = mixer(u)
    assert out.shape == (2, 11, 8)
    for b in range(2):
        expected, _, _ = _paper_block(mixer, u[b].double())
        torch.testing.assert_close(out[b].double(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('segment_len', [3, 4, 10])
def test_no_grad_segments_match_float64_recurrence(segment_len):
    """Without grad, L = 11 runs in segments (3: four of 3, 3, 3, 2 tokens; each conv window
    reads its neighbours) and gives the whole-sequence result."""
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(8, d_state=4, d_conv=4, expand=2, headdim=4,
                                     chunk_size=2, segment_len=segment_len)
    _randomise(mixer, seed=5)
    u = torch.randn(2, 11, 8)
    with torch.no_grad():
        out = mixer(u)
    for b in range(2):
        expected, _, _ = _paper_block(mixer, u[b].double())
        torch.testing.assert_close(out[b].double(), expected, rtol=1e-4, atol=1e-4)


def test_no_grad_segments_match_the_whole_sequence_with_projection_biases():
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(8, d_state=4, headdim=4, chunk_size=4, bias=True,
                                     segment_len=5)
    _randomise(mixer, seed=7)
    u = torch.randn(1, 13, 8)
    whole = mixer(u)  # autograd on: one call over the whole sequence
    with torch.no_grad():
        torch.testing.assert_close(mixer(u), whole.detach(), rtol=1e-5, atol=1e-5)


def test_ssd_inputs_and_mixing_matrices_reproduce_each_direction():
    torch.manual_seed(1)
    mixer = BidirectionalMamba2Mixer(8, d_state=4, d_conv=4, headdim=4, chunk_size=8)
    _randomise(mixer, seed=3)
    u = torch.randn(1, 9, 8)
    inputs = mixer.ssd_inputs(u)
    assert set(inputs) == {'forward', 'backward', 'z'}
    assert set(MIXING_MATRIX_KEYS) <= set(inputs['forward'])
    assert inputs['forward']['reverse'] is False and inputs['backward']['reverse'] is True
    assert inputs['forward']['B'].shape == (1, 9, 1, 4)
    matrices = mixer.mixing_matrix(u)
    assert list(matrices) == ['forward', 'backward', 'combined']
    m_fwd, m_bwd = matrices['forward'], matrices['backward']
    assert m_fwd.shape == m_bwd.shape == (1, mixer.num_heads, 9, 9)
    assert m_fwd.dtype == torch.float32
    torch.testing.assert_close(matrices['combined'], (m_fwd + m_bwd) / 2, rtol=0, atol=0)
    rows = torch.tensor([4, 0])
    for name, matrix in mixer.mixing_matrix(u, rows).items():
        torch.testing.assert_close(matrix, matrices[name][:, :, rows], rtol=0, atol=0)
    # causal forward, anti-causal backward
    assert torch.all(m_fwd[0].triu(1) == 0) and torch.all(m_bwd[0].tril(-1) == 0)
    _, y_fwd, y_bwd = _paper_block(mixer, u[0].double())
    for m, name, expected in ((m_fwd, 'forward', y_fwd), (m_bwd, 'backward', y_bwd)):
        x = inputs[name]['x']
        y = torch.einsum('bhij,bjhp->bihp', m, x) + inputs[name]['D'][:, None] * x
        torch.testing.assert_close(y[0].reshape(9, -1).double(), expected, rtol=1e-4,
                                   atol=1e-4)


def test_mixer_init_follows_mamba2():
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(64, headdim=16, d_state=8)
    for name in ('dt_bias', 'dt_b_bias'):
        dt = torch.nn.functional.softplus(getattr(mixer, name))
        assert dt.min() >= 1e-3 - 1e-7 and dt.max() <= 0.1 + 1e-7
    for name in ('A_log', 'A_log_b'):
        a = getattr(mixer, name).exp()
        assert a.min() >= 1 and a.max() <= 16
    assert mixer.in_proj.bias is None and mixer.out_proj.bias is None
    assert mixer.conv1d.bias is not None and mixer.conv1d_b.bias is not None
    assert mixer.in_proj.weight.shape == (2 * 128 + 2 * 8 + 8, 64)


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(headdim=5), ValueError, 'headdim'),
    (dict(headdim=4, ngroups=3), ValueError, 'ngroups'),
    (dict(headdim=4, A_init_range=(0, 4)), ValueError, 'A_init_range'),
    (dict(headdim=4, segment_len=0), ValueError, 'segment_len must be an int >= 1, got 0'),
    (dict(headdim=4, segment_len=2.5), TypeError, 'segment_len must be an int >= 1, got 2.5'),
])
def test_mixer_rejects_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        BidirectionalMamba2Mixer(8, d_state=4, **kwargs)


def test_mixer_gradients_pass_gradcheck_in_float64(monkeypatch):
    """Finite differences need float64 end to end, so the scan is the float64 oracle here."""
    import dinomamba_mm.models.layers.bidirectional_mamba2 as mixer_module
    monkeypatch.setattr(mixer_module, 'ssd_scan_directions', _oracle_scan_both)
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(8, d_state=4, headdim=4, chunk_size=4).double()
    u = torch.randn(1, 6, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(mixer, (u, ), eps=1e-6, atol=1e-6)


def test_the_mixer_refuses_a_dt_range_it_cannot_initialise():
    """log-uniform init in [dt_min, dt_max] needs 0 < dt_min <= dt_max (math domain error or a
    reversed range otherwise), whoever builds the mixer."""
    with pytest.raises(ValueError, match=r'dt_max must be a number in \[0\.5, inf\), got 0\.1'):
        BidirectionalMamba2Mixer(32, d_state=8, headdim=8, dt_min=0.5, dt_max=0.1)
    with pytest.raises(ValueError, match=r'dt_min must be a number in \(0, inf\), got 0'):
        BidirectionalMamba2Mixer(32, d_state=8, headdim=8, dt_min=0, dt_max=0.1)


def _oracle_scan_both(x, dt, A, B, C, reverse, chunk_size, D, dt_bias, dt_softplus, dt_limit,
                     impl):
    """``ssd_scan_directions`` as the float64 recurrence, one direction at a time."""
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    return torch.stack([
        ssd_scan_naive(*args, D=d, dt_bias=bias, dt_softplus=dt_softplus, reverse=rev)
        for *args, d, bias, rev in zip(x, dt, A, B, C, D, dt_bias, reverse)])


def test_backward_keeps_in_proj_output_and_scan_outputs_only(monkeypatch):
    """For the backward pass a mixer keeps its input u, in_proj's output, both scans' outputs
    and out_proj's input (the convolutions, gates, norms and the scan's intermediates are
    recomputed; the convolved x, B, C are rebuilt); the scan runs once, and every gradient
    matches the float64 recurrence."""
    import copy

    import dinomamba_mm.models.layers.bidirectional_mamba2 as mixer_module
    from dinomamba_mm.ops.ssd import chunk
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(16, d_state=8, headdim=8, chunk_size=16, ssd_impl='torch')
    _randomise(mixer, seed=5)
    reference = copy.deepcopy(mixer).double()
    u = torch.randn(2, 40, 16, requires_grad=True)
    params = {p.untyped_storage().data_ptr() for p in mixer.parameters()}
    saved = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    scans = []
    forward = chunk.forward
    monkeypatch.setattr(chunk, 'forward', lambda *args: scans.append(1) or forward(*args))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = mixer(u)
    tokens = u.shape[0] * u.shape[1]
    # u, in_proj's output, y_fwd, y_bwd, out_proj's input and each norm's inverse RMS (float32)
    per_token = 4 * (mixer.embed_dims + mixer.in_proj.out_features + 3 * mixer.d_inner
                     + 2 * mixer.ngroups)
    taps = 2 * 4 * (mixer.d_conv + 1) * mixer.conv_dim  # the convs' transposed weights, biases
    assert sum(saved.values()) <= tokens * per_token + taps + 256, sorted(saved.values())
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * weights).sum().backward()
    assert len(scans) == 1

    monkeypatch.setattr(mixer_module, 'ssd_scan_directions', _oracle_scan_both)
    u_ref = u.detach().double().requires_grad_()
    (reference(u_ref) * weights.double()).sum().backward()
    grads = [('u', u.grad, u_ref.grad)] + [
        (name, p.grad, p_ref.grad) for (name, p), p_ref in zip(mixer.named_parameters(),
                                                                 reference.parameters())]
    for name, grad, expected in grads:
        err = (grad.double() - expected).abs().max() / expected.abs().max().clamp(min=1)
        assert err < 1e-4, f'd{name}: {err:.2e}'


def test_outer_saved_tensor_hooks_see_what_the_mixer_keeps():
    """Under other saved-tensor hooks (here: offloading, which packs to a (device, tensor) pair)
    the mixer's gradients are unchanged, and those hooks receive every kept tensor (xBC's source
    included) but none of the rebuilt conv outputs."""
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(16, d_state=8, headdim=8, chunk_size=16, ssd_impl='torch')
    _randomise(mixer, seed=6)
    u = torch.randn(1, 30, 16, requires_grad=True)
    (mixer(u) ** 2).sum().backward()
    expected = [p.grad.clone() for p in (u, *mixer.parameters())]
    for p in (u, *mixer.parameters()):
        p.grad = None
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return ('packed', t)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda packed: packed[1]):
        out = mixer(u)
    (out ** 2).sum().backward()
    for grad, want in zip((u.grad, *(p.grad for p in mixer.parameters())), expected):
        torch.testing.assert_close(grad, want, rtol=0, atol=0)
    assert (1, 30, mixer.conv_dim) in shapes  # xBC, the conv input and the rebuilds' source
    assert not [s for s in shapes if len(s) == 4 and s[:2] == (1, 30) and s[-1] > 1]  # x, B, C


def test_torch_reports_the_innermost_saved_tensor_hooks():
    """The mixer hands what it does not rebuild to the saved-tensor hooks that were active
    before its own; torch has no public way to read them, so it calls the private
    ``torch._C._autograd._top_saved_tensors_default_hooks`` (docs/faq.md). This fails when that
    function changes (checked on torch 2.11 and 2.14)."""
    top = torch._C._autograd._top_saved_tensors_default_hooks
    pairs = [(lambda t: t, lambda t: t) for _ in range(2)]
    assert top(False) is None
    with torch.autograd.graph.saved_tensors_hooks(*pairs[0]):
        assert top(False) == pairs[0]
        with torch.autograd.graph.saved_tensors_hooks(*pairs[1]):
            assert top(False) == pairs[1]
        assert top(False) == pairs[0]
    assert top(False) is None
