"""The token-mixer interface: every registered mixer's mixing_matrix, mmpretrain's attention by
registration, the depth-scaled output initialisation, and no mixer class named by the analysis."""
import ast
import math
import os.path as osp

import pytest
import torch
from mmpretrain.models.utils import MultiheadAttention

from dinomamba_mm.models.layers import (SoftmaxAttention, mixing_matrix_of,
                                        register_mixing_matrix)
from dinomamba_mm.registry import MODELS

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
MIXERS = {
    'BidirectionalMamba2Mixer': (dict(d_state=4, headdim=8, chunk_size=4),
                                 ['forward', 'backward', 'combined'], 4),
    'LinearMultiheadAttention': (dict(num_heads=2), ['linear'], 2),
    'SoftmaxAttention': (dict(num_heads=2), ['softmax'], 2),
}


def _mixer(name, seed=0):
    torch.manual_seed(seed)
    kwargs, _, _ = MIXERS[name]
    return MODELS.build(dict(type=f'dinomamba_mm.{name}', embed_dims=16, **kwargs)).eval()


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_every_registered_mixer_gives_its_named_matrices(name):
    """(B, H, L, L) float32 per name, in the mixer's order; rows select query rows."""
    mixer = _mixer(name)
    _, names, heads = MIXERS[name]
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = mixer.mixing_matrix(x)
        rows = torch.tensor([6, 0, 3])
        some = mixer.mixing_matrix(x, rows)
    assert list(full) == names == list(some)
    for key in names:
        assert full[key].shape == (2, heads, 7, 7) and full[key].dtype == torch.float32
        torch.testing.assert_close(some[key], full[key][:, :, rows], rtol=0, atol=0)


def _v(attention, x):
    """V (B, L, heads, head_dims) of an mmpretrain-style attention."""
    batch, length, _ = x.shape
    qkv = attention.qkv(x).reshape(batch, length, 3, attention.num_heads, attention.head_dims)
    return qkv[:, :, 2]


@pytest.mark.parametrize('build', [
    lambda: _mixer('LinearMultiheadAttention'), lambda: _mixer('SoftmaxAttention'),
    lambda: MultiheadAttention(embed_dims=16, num_heads=2)
], ids=['linear', 'softmax', 'mmpretrain'])
def test_attention_applies_its_mixing_matrix(build):
    """Y = M V through the output projection is the module's own forward (for mmpretrain's
    MultiheadAttention, M comes through the registration)."""
    attention = build()
    attention.eval()
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        (matrix, ) = mixing_matrix_of(attention)(x).values()
        mixed = torch.einsum('bhij,bjhd->bihd', matrix, _v(attention, x)).flatten(2)
        torch.testing.assert_close(attention.proj(mixed), attention(x), rtol=1e-4, atol=1e-5)


def test_mmpretrains_attention_gets_the_interface_by_registration_alone():
    """mmpretrain's class is not patched; SoftmaxAttention is it with the interface added (same
    state dict, same matrix); a subclass of it that mixes otherwise is not taken for it."""
    assert not hasattr(MultiheadAttention, 'mixing_matrix')
    ours = _mixer('SoftmaxAttention')
    theirs = MultiheadAttention(embed_dims=16, num_heads=2)
    theirs.load_state_dict(ours.state_dict())  # strict: same keys and shapes
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(mixing_matrix_of(theirs)(x)['softmax'],
                                   ours.mixing_matrix(x)['softmax'], rtol=0, atol=0)

    class ScaledAttention(MultiheadAttention):
        pass

    assert mixing_matrix_of(ScaledAttention(embed_dims=16, num_heads=2)) is None
    assert mixing_matrix_of(torch.nn.Linear(2, 2)) is None
    with pytest.raises(KeyError, match='already registered for MultiheadAttention'):
        register_mixing_matrix(MultiheadAttention)(lambda module, x, rows=None: {})


@pytest.mark.parametrize('name, output', [('BidirectionalMamba2Mixer', 'out_proj'),
                                          ('LinearMultiheadAttention', 'proj'),
                                          ('SoftmaxAttention', 'proj')])
def test_residual_output_init_is_scaled_by_depth(name, output):
    """Kaiming-uniform(a = sqrt(5)) is U(-1 / sqrt(fan_in), 1 / sqrt(fan_in)); divided by
    sqrt(num_layers) its bound is 1 / sqrt(fan_in * num_layers), and it is drawn anew."""
    mixer = _mixer(name)
    weight = getattr(mixer, output).weight
    before = weight.detach().clone()
    mixer.init_residual_output(16)
    bound = 1 / math.sqrt(weight.shape[1] * 16)
    assert weight.abs().max() <= bound and weight.abs().max() > 0.9 * bound
    assert not torch.equal(weight, before / 4)


def _isinstance_class_names(path):
    """Names of the classes in the second argument of every isinstance call of a file."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'isinstance':
            for part in ast.walk(node.args[1]):
                if isinstance(part, (ast.Name, ast.Attribute)):
                    names.add(part.id if isinstance(part, ast.Name) else part.attr)
    return names


def test_no_code_checks_the_type_of_a_mixer():
    """The analysis and the backbones ask a mixer for its interface; none tests its class."""
    import subprocess
    files = subprocess.run(['git', 'ls-files', 'dinomamba_mm/*.py', 'tools/*.py'], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    assert len(files) > 50
    mixers = set(MIXERS) | {'MultiheadAttention'}
    checked = {path: _isinstance_class_names(osp.join(ROOT, path)) & mixers for path in files}
    assert not {path: names for path, names in checked.items() if names}
