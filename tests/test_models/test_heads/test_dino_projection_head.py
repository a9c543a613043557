"""DINOProjectionHead against a float64 numpy forward pass written from DINO's definition."""
import numpy as np
import pytest
import torch
from scipy.special import erf

from dinomamba_mm.models.heads import DINOProjectionHead


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _numpy_forward(head, x):
    linears = [m for m in head.mlp if isinstance(m, torch.nn.Linear)]
    h = x
    for i, layer in enumerate(linears):
        h = h @ layer.weight.detach().double().numpy().T + layer.bias.detach().double().numpy()
        if i < len(linears) - 1:
            h = _gelu(h)
    h = h / np.linalg.norm(h, axis=-1, keepdims=True)
    g = head.last_layer.parametrizations.weight.original0.detach().double().numpy()
    v = head.last_layer.parametrizations.weight.original1.detach().double().numpy()
    w = g * v / np.linalg.norm(v, axis=1, keepdims=True)
    return h @ w.T


@pytest.mark.parametrize('num_layers', [1, 3])
def test_forward_matches_numpy(num_layers):
    torch.manual_seed(0)
    head = DINOProjectionHead(in_channels=6, out_channels=11, hidden_channels=9,
                              bottleneck_channels=5, num_layers=num_layers,
                              norm_last_layer=False)
    with torch.no_grad():  # a magnitude different from 1 so that g matters
        head.last_layer.parametrizations.weight.original0.uniform_(0.5, 2.0)
    x = torch.randn(4, 6, dtype=torch.float64)
    out = head.double()(x)
    assert out.shape == (4, 11)
    np.testing.assert_allclose(out.detach().numpy(), _numpy_forward(head, x.numpy()),
                               rtol=1e-10, atol=1e-12)


def test_architecture_defaults():
    head = DINOProjectionHead(in_channels=8, out_channels=16)
    widths = [(m.in_features, m.out_features) for m in head.mlp if isinstance(m, torch.nn.Linear)]
    assert widths == [(8, 2048), (2048, 2048), (2048, 256)]
    assert sum(isinstance(m, torch.nn.GELU) for m in head.mlp) == 2
    assert head.last_layer.weight.shape == (16, 256)
    assert head.last_layer.bias is None


def test_norm_last_layer_fixes_unit_rows():
    torch.manual_seed(0)
    head = DINOProjectionHead(in_channels=4, out_channels=6, hidden_channels=5,
                              bottleneck_channels=3, norm_last_layer=True)
    g = head.last_layer.parametrizations.weight.original0
    assert not g.requires_grad and torch.all(g == 1)
    # rows of W have unit norm even after V changes
    with torch.no_grad():
        head.last_layer.parametrizations.weight.original1.mul_(7.0)
    np.testing.assert_allclose(head.last_layer.weight.norm(dim=1).detach().numpy(), 1.0,
                               rtol=1e-6)
    trainable = {n for n, p in head.named_parameters() if p.requires_grad}
    assert 'last_layer.parametrizations.weight.original0' not in trainable
    assert 'last_layer.parametrizations.weight.original1' in trainable
    free = DINOProjectionHead(in_channels=4, out_channels=6, norm_last_layer=False)
    assert free.last_layer.parametrizations.weight.original0.requires_grad


def test_bad_input():
    head = DINOProjectionHead(in_channels=4, out_channels=6, hidden_channels=5,
                              bottleneck_channels=3)
    with pytest.raises(ValueError, match=r'\(B, 4\)'):
        head(torch.zeros(2, 5))
    with pytest.raises(ValueError, match='num_layers'):
        DINOProjectionHead(in_channels=4, num_layers=0)
