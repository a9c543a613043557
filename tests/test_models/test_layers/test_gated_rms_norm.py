"""GatedRMSNorm vs hand-written formulas."""
import torch

from dinomamba_mm.models.layers import GatedRMSNorm


def test_gate_then_norm_per_group():
    torch.manual_seed(0)
    norm = GatedRMSNorm(6, eps=0., group_size=3)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1., 7.))
    x, z = torch.randn(4, 6), torch.randn(4, 6)
    gated = x * z * torch.sigmoid(z)
    first, second = gated[:, :3], gated[:, 3:]
    expected = torch.cat([first / first.pow(2).mean(-1, keepdim=True).sqrt(),
                          second / second.pow(2).mean(-1, keepdim=True).sqrt()], -1)
    torch.testing.assert_close(norm(x, z), expected * torch.arange(1., 7.))


def test_norm_before_gate():
    torch.manual_seed(0)
    norm = GatedRMSNorm(4, eps=0., norm_before_gate=True)
    x, z = torch.randn(3, 4), torch.randn(3, 4)
    expected = x / x.pow(2).mean(-1, keepdim=True).sqrt() * z * torch.sigmoid(z)
    torch.testing.assert_close(norm(x, z), expected)
