"""LinearMultiheadAttention vs an explicit L x L formulation of phi(Q) phi(K)^T V."""
import pytest
import torch

from dinomamba_mm.models.layers import LinearMultiheadAttention


def _explicit(attn: LinearMultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """Per head: A = softmax_feat(Q) softmax_feat(K)^T (L x L, no scale), out = A V."""
    x = x.double()
    w_qkv, b_qkv = attn.qkv.weight.double(), attn.qkv.bias.double()
    heads, d = attn.num_heads, attn.head_dims
    c = heads * d
    q, k, v = (x @ w_qkv[i * c:(i + 1) * c].T + b_qkv[i * c:(i + 1) * c] for i in range(3))
    outs = []
    for h in range(heads):
        sl = slice(h * d, (h + 1) * d)
        phi_q = torch.exp(q[..., sl]) / torch.exp(q[..., sl]).sum(-1, keepdim=True)
        phi_k = torch.exp(k[..., sl]) / torch.exp(k[..., sl]).sum(-1, keepdim=True)
        mixing = phi_q @ phi_k.transpose(-2, -1)  # (B, L, L)
        outs.append(mixing @ v[..., sl])
    return torch.cat(outs, -1) @ attn.proj.weight.double().T + attn.proj.bias.double()


def test_linear_attention_equals_explicit_matrix_form():
    torch.manual_seed(0)
    attn = LinearMultiheadAttention(embed_dims=12, num_heads=3)
    x = torch.randn(2, 17, 12)
    torch.testing.assert_close(attn(x).double(), _explicit(attn, x), rtol=1e-5, atol=1e-5)


def test_feature_maps_are_row_softmaxes_per_head():
    torch.manual_seed(0)
    attn = LinearMultiheadAttention(embed_dims=12, num_heads=3)
    x = torch.randn(2, 5, 12)
    phi_q, phi_k = attn.feature_maps(x)
    assert phi_q.shape == phi_k.shape == (2, 3, 5, 4)
    torch.testing.assert_close(phi_q.sum(-1), torch.ones(2, 3, 5))
    q = x @ attn.qkv.weight[:12].T + attn.qkv.bias[:12]
    torch.testing.assert_close(phi_q[:, 1], q[..., 4:8].softmax(-1))


def test_linear_attention_rejects_attention_dropout():
    with pytest.raises(ValueError, match='attn_drop'):
        LinearMultiheadAttention(embed_dims=8, num_heads=2, attn_drop=0.1)
