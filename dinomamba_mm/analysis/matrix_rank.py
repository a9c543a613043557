"""Numerical and effective rank of the C x C blocks of a token-mixing matrix M (L x L).

- numerical rank: ``torch.linalg.matrix_rank(block, rtol=max(C) * eps)`` with eps = eps(float32)
  = 1.19e-7, since M is formed in float32 (its entries carry float32 rounding, which float64
  singular values would otherwise count as rank); :func:`block_ranks` counts it from the spectrum
  it returns anyway (``torch.linalg.svdvals``) with that rule, rather than having matrix_rank
  compute the same SVD again;
- effective rank (Roy & Vetterli, 2007): exp(-sum_i p_i log p_i) with p_i = sigma_i / sum sigma,
  between 1 and C; 0 for an all-zero block (no library has it).

Blocks: M is cut into floor(L / C)^2 blocks of C x C tokens from the top-left; the last L mod C
rows / columns (if any) are left out. Blocks on the diagonal are 'diagonal', those below it
'lower', those above it 'upper' (a causal forward scan has zero upper blocks).
"""
from typing import Dict, Union

import numpy as np
import torch

from dinomamba_mm.argument_checks import check_int

FLOAT32_EPS = float(torch.finfo(torch.float32).eps)
BLOCK_KINDS = ('diagonal', 'lower', 'upper')


def _float64(matrices: Union[np.ndarray, torch.Tensor]) -> torch.Tensor:
    if isinstance(matrices, torch.Tensor):
        return matrices.detach().cpu().double()
    return torch.from_numpy(np.asarray(matrices, dtype=np.float64))


def numerical_rank(matrices: Union[np.ndarray, torch.Tensor],
                   eps: float = FLOAT32_EPS) -> np.ndarray:
    """Ranks (...) of matrices (..., m, n): ``torch.linalg.matrix_rank`` in float64 with
    ``rtol = max(m, n) * eps`` (numpy's default tolerance for matrices formed in float32)."""
    matrices = _float64(matrices)
    return torch.linalg.matrix_rank(matrices, rtol=max(matrices.shape[-2:]) * eps).numpy()


def effective_rank(sigma: np.ndarray) -> np.ndarray:
    """Roy & Vetterli's effective rank from singular values (..., k); 0 where all are 0."""
    total = sigma.sum(axis=-1, keepdims=True)
    p = np.divide(sigma, total, out=np.zeros_like(sigma), where=total > 0)
    entropy = -(p * np.log(np.where(p > 0, p, 1))).sum(axis=-1)
    return np.where(total[..., 0] > 0, np.exp(entropy), 0.0)


def default_block_size(length: int) -> int:
    """256 for sequences of at least 1024 tokens, else length // 4 (at least 1): four blocks
    per row, so small inputs still have off-diagonal blocks to compare."""
    return 256 if length >= 1024 else max(1, length // 4)


def block_ranks(matrix: Union[np.ndarray, torch.Tensor],
                block_size: int) -> Dict[str, Dict[str, np.ndarray]]:
    """Ranks and spectra of the C x C blocks of mixing matrices.

    Args:
        matrix (np.ndarray | torch.Tensor): Mixing matrices of shape (..., L, L), e.g.
            (B, H, L, L); the leading axes are batched.
        block_size (int): The block size C, 1 <= C <= L.

    Returns:
        Dict[str, Dict[str, np.ndarray]]: For each of 'diagonal', 'lower' and 'upper', a dict
        of 'numerical_rank' (..., nb) int, 'effective_rank' (..., nb) float and
        'singular_values' (..., nb, C) float64, where nb is the number of blocks of that kind
        (empty when there is only one block per row).
    """
    matrix = _float64(matrix)
    if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f'matrix must be (..., L, L), got shape {tuple(matrix.shape)}')
    length = matrix.shape[-1]
    check_int('block_size', block_size, 1, length)
    num = length // block_size
    blocks = matrix[..., :num * block_size, :num * block_size].reshape(
        *matrix.shape[:-2], num, block_size, num, block_size)
    blocks = blocks.movedim(-3, -2)  # (..., row block, col block, C, C)
    sigma = torch.linalg.svdvals(blocks)  # descending
    # torch.linalg.matrix_rank's rule on the same spectrum
    ranks = (sigma > sigma[..., :1] * block_size * FLOAT32_EPS).sum(dim=-1).numpy()
    sigma = sigma.numpy()
    rows, cols = np.indices((num, num))
    result = {}
    for kind, selected in zip(BLOCK_KINDS, (rows == cols, rows > cols, rows < cols)):
        s = sigma[..., selected, :]
        result[kind] = dict(numerical_rank=ranks[..., selected], effective_rank=effective_rank(s),
                            singular_values=s)
    return result
