"""Block ranks against numpy (the previous implementation: np.linalg.svd and np.linalg.matrix_rank)
and hand-computed effective ranks."""
import numpy as np
import pytest
import torch

from dinomamba_mm.analysis import block_ranks, default_block_size, effective_rank, numerical_rank


def _low_rank(rng, size, rank):
    return (rng.standard_normal((size, rank)) @ rng.standard_normal((rank, size)))


def test_numerical_rank_matches_numpy_on_float32_blocks():
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((24, 24))
    matrix[8:16, :8] = _low_rank(rng, 8, 3)  # one lower block of rank 3
    matrix[:8, 16:] = 0  # one upper block of zeros
    matrix = matrix.astype(np.float32)
    result = block_ranks(torch.from_numpy(matrix)[None], block_size=8)
    expected = {
        'diagonal': [np.linalg.matrix_rank(matrix[i:i + 8, i:i + 8]) for i in (0, 8, 16)],
        'lower': [np.linalg.matrix_rank(matrix[r:r + 8, c:c + 8])
                  for r, c in ((8, 0), (16, 0), (16, 8))],
        'upper': [np.linalg.matrix_rank(matrix[r:r + 8, c:c + 8])
                  for r, c in ((0, 8), (0, 16), (8, 16))],
    }
    for kind, ranks in expected.items():
        np.testing.assert_array_equal(result[kind]['numerical_rank'][0], ranks)
    assert result['lower']['numerical_rank'][0, 0] == 3
    assert result['upper']['numerical_rank'][0, 1] == 0
    assert result['upper']['effective_rank'][0, 1] == 0


def test_spectra_and_whole_ranks_equal_numpys():
    """torch.linalg.svdvals / matrix_rank give what numpy's float64 SVD gave, batched."""
    rng = np.random.default_rng(1)
    matrices = rng.standard_normal((2, 3, 24, 24))
    matrices[0, 1] = _low_rank(rng, 24, 5)
    matrices = matrices.astype(np.float32)
    result = block_ranks(torch.from_numpy(matrices), block_size=8)
    rows, cols = np.indices((3, 3))
    for kind, selected in (('diagonal', rows == cols), ('lower', rows > cols),
                           ('upper', rows < cols)):
        blocks = [matrices[..., 8 * r:8 * r + 8, 8 * c:8 * c + 8].astype(np.float64)
                  for r, c in zip(rows[selected], cols[selected])]
        expected = np.linalg.svd(np.stack(blocks, axis=-3), compute_uv=False)
        np.testing.assert_allclose(result[kind]['singular_values'], expected, rtol=1e-12,
                                   atol=1e-12 * expected.max())
    whole = numerical_rank(matrices)
    np.testing.assert_array_equal(whole, np.linalg.matrix_rank(matrices))
    assert whole[0, 1] == 5 and whole[1, 2] == 24


def test_effective_rank_by_hand():
    assert effective_rank(np.ones(5)) == pytest.approx(5.0)
    assert effective_rank(np.array([2.0, 0, 0])) == pytest.approx(1.0)
    p = np.array([0.75, 0.25])
    assert effective_rank(np.array([3.0, 1.0])) == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    identity = block_ranks(np.eye(12), block_size=4)
    np.testing.assert_allclose(identity['diagonal']['effective_rank'], 4.0)


def test_tail_is_dropped_and_bad_block_size():
    result = block_ranks(np.eye(10), block_size=4)  # 2 x 2 blocks, last 2 tokens left out
    assert result['diagonal']['numerical_rank'].shape == (2, )
    assert result['diagonal']['singular_values'].shape == (2, 4)
    with pytest.raises(ValueError, match=r'block_size must be an int in \[1, 10\], got 11'):
        block_ranks(np.eye(10), block_size=11)
    with pytest.raises(ValueError, match=r'matrix must be \(\.\.\., L, L\)'):
        block_ranks(np.ones((3, 4)), block_size=2)
    assert default_block_size(4096) == 256 and default_block_size(257) == 64
