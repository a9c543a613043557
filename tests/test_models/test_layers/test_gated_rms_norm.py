"""GatedRMSNorm vs hand-written formulas, with autograd and without (the in-place path)."""
import pytest
import torch

from dinomamba_mm.models.layers import GatedRMSNorm


@pytest.mark.parametrize('grad', [True, False])
def test_gate_then_norm_per_group(grad):
    torch.manual_seed(0)
    norm = GatedRMSNorm(6, eps=0., group_size=3)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1., 7.))
    x, z = torch.randn(4, 6), torch.randn(4, 6)
    gated = x * z * torch.sigmoid(z)
    first, second = gated[:, :3], gated[:, 3:]
    expected = torch.cat([first / first.pow(2).mean(-1, keepdim=True).sqrt(),
                          second / second.pow(2).mean(-1, keepdim=True).sqrt()], -1)
    with torch.set_grad_enabled(grad):
        out = norm(x, z)
    torch.testing.assert_close(out, expected * torch.arange(1., 7.))
    assert out.requires_grad == grad


@pytest.mark.parametrize('grad', [True, False])
def test_norm_before_gate(grad):
    torch.manual_seed(0)
    norm = GatedRMSNorm(4, eps=0., norm_before_gate=True)
    x, z = torch.randn(3, 4), torch.randn(3, 4)
    expected = x / x.pow(2).mean(-1, keepdim=True).sqrt() * z * torch.sigmoid(z)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(norm(x, z), expected)
        torch.testing.assert_close(norm(x), x / x.pow(2).mean(-1, keepdim=True).sqrt())


def test_no_grad_path_leaves_inputs_alone_and_keeps_dtype():
    norm = GatedRMSNorm(4, group_size=2)
    x, z = torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(3, 4, dtype=torch.bfloat16)
    x_before, z_before = x.clone(), z.clone()
    with torch.no_grad():
        out = norm(x, z)
    assert out.dtype == torch.bfloat16
    assert torch.equal(x, x_before) and torch.equal(z, z_before)
    torch.testing.assert_close(out, norm(x, z))


@pytest.mark.parametrize('norm_before_gate', [False, True])
@pytest.mark.parametrize('gated', [False, True])
def test_gradients_pass_gradcheck(norm_before_gate, gated):
    """The hand-written backward (x, z and the weight) against finite differences, two groups of
    three channels."""
    torch.manual_seed(0)
    norm = GatedRMSNorm(6, eps=1e-5, group_size=3, norm_before_gate=norm_before_gate)
    x = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    z = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True) if gated else None
    weight = torch.randn(6, dtype=torch.float64, requires_grad=True)

    def run(x, weight, z=None):
        return torch.func.functional_call(norm, {'weight': weight}, (x, z))

    inputs = (x, weight, z) if gated else (x, weight)
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-7)
