"""depthwise_conv_silu vs nn.Conv1d on a zero-padded (B, C, L) sequence, and finite differences."""
import pytest
import torch
import torch.nn.functional as F

from dinomamba_mm.models.layers.depthwise_conv import depthwise_conv_silu


def _reference(x, weight, bias, causal):
    """F.conv1d over (B, C, L) left-padded with K - 1 zeros; anti-causal via flips."""
    seq = x.transpose(1, 2)
    if not causal:
        seq = seq.flip(-1)
    width = weight.shape[1]
    out = F.conv1d(F.pad(seq, (width - 1, 0)), weight[:, None], bias, groups=weight.shape[0])
    if not causal:
        out = out.flip(-1)
    return F.silu(out).transpose(1, 2)


@pytest.mark.parametrize('causal', [True, False])
@pytest.mark.parametrize('length, width', [(9, 4), (3, 4), (1, 3), (6, 1)])
def test_matches_conv1d_with_and_without_grad(causal, length, width):
    gen = torch.Generator().manual_seed(length * 10 + width)
    x = torch.randn(2, length, 5, generator=gen, dtype=torch.float64)
    weight = torch.randn(5, width, generator=gen, dtype=torch.float64)
    bias = torch.randn(5, generator=gen, dtype=torch.float64)
    expected = _reference(x, weight, bias, causal)
    with torch.no_grad():
        torch.testing.assert_close(depthwise_conv_silu(x, weight, bias, causal), expected)
    out = depthwise_conv_silu(x, weight.requires_grad_(), None, causal)
    torch.testing.assert_close(out, _reference(x, weight, None, causal))


@pytest.mark.parametrize('causal', [True, False])
def test_gradients_pass_gradcheck(causal):
    gen = torch.Generator().manual_seed(int(causal))
    x = torch.randn(2, 7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *args: depthwise_conv_silu(*args, causal=causal), (x, weight, bias))


def test_stacked_weights_give_each_convolution():
    """A (D, C, K) weight with one causal flag per convolution: each output equals the
    single-direction conv of its weights, forward and gradients (x's sums both)."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 9, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    out = depthwise_conv_silu(x, weight, bias, causal=(True, False))
    assert out.shape == (2, 2, 9, 5)
    for k, causal in enumerate((True, False)):
        torch.testing.assert_close(out[k], _reference(x, weight[k], bias[k], causal))
    assert torch.autograd.gradcheck(
        lambda *args: depthwise_conv_silu(*args, causal=(True, False)), (x, weight, bias))
    with pytest.raises(ValueError, match='weight must have shape'):
        depthwise_conv_silu(x, weight, bias, causal=(True, ))


def test_rejects_bad_shapes():
    x = torch.randn(1, 4, 3)
    with pytest.raises(ValueError, match=r'x must have shape \(B, L, C\)'):
        depthwise_conv_silu(x[0], torch.randn(3, 4), None)
    with pytest.raises(ValueError, match='weight must have shape'):
        depthwise_conv_silu(x, torch.randn(2, 4), None)
    with pytest.raises(ValueError, match='bias must have shape'):
        depthwise_conv_silu(x, torch.randn(3, 4), torch.randn(4))
