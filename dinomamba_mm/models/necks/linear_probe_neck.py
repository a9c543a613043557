"""Feature of a DINO linear probe: class tokens of the last blocks, concatenated."""
from typing import Sequence, Tuple

import torch
from mmengine.model import BaseModule

from dinomamba_mm.argument_checks import check_bool, check_choice
from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class LinearProbeNeck(BaseModule):
    """Concatenate the per-block features a backbone returns into one probe feature.

    DINO's linear evaluation (and the Dino-Mamba paper's) feeds a linear classifier with the
    final-normed class token of the last ``n`` blocks concatenated (n = 8 for DinoVim T / B, 4 for
    DinoVim S and ViT-S); for ViT-B, DINO instead uses the last block's class token concatenated
    with the average of that block's patch tokens (``avgpool_patch_tokens=True``).

    The backbone's ``out_indices`` select the blocks; this neck only arranges their outputs.

    Args:
        in_type (str): What each backbone output is.
            ``'cls_token'``: a class token ``(B, C)`` per block (``DinoVim`` / ``LinearViT`` with
            ``out_type='cls_token'``).
            ``'raw'``: the whole token sequence ``(B, 1 + L, C)`` with the class token first
            (mmpretrain's ``VisionTransformer`` with ``out_type='raw'``).
        avgpool_patch_tokens (bool): Append the mean of the last output's patch tokens
            (``in_type='raw'`` only). Defaults to False.

    Inputs: a tuple of n tensors as described by ``in_type``.
    Output: a 1-tuple holding the feature ``(B, n * C)``, or ``(B, (n + 1) * C)`` with
    ``avgpool_patch_tokens`` (a tuple, as mmpretrain heads read ``feats[-1]``). Blocks are laid
    side by side, the pooled patch tokens last; DINO's own code interleaves class token and pooled
    channels, a permutation that matters only when importing DINO's released linear weights.
    """

    IN_TYPES = ('cls_token', 'raw')

    def __init__(self, in_type: str = 'cls_token',
                 avgpool_patch_tokens: bool = False) -> None:
        super().__init__()
        check_choice('in_type', in_type, self.IN_TYPES)
        check_bool('avgpool_patch_tokens', avgpool_patch_tokens)
        if avgpool_patch_tokens and in_type != 'raw':
            raise ValueError('avgpool_patch_tokens=True needs the patch tokens, '
                             "i.e. in_type='raw', got in_type="
                             f'{in_type!r}')
        self.in_type = in_type
        self.avgpool_patch_tokens = avgpool_patch_tokens

    def forward(self, inputs: Sequence[torch.Tensor]
                ) -> Tuple[torch.Tensor]:
        if isinstance(inputs, torch.Tensor) or not isinstance(
                inputs, (tuple, list)):
            raise TypeError('inputs must be a tuple of per-block tensors, got '
                            f'{type(inputs).__name__}')
        if len(inputs) == 0:
            raise ValueError('inputs is empty: the backbone returned no blocks')
        expected_ndim = 2 if self.in_type == 'cls_token' else 3
        for i, x in enumerate(inputs):
            if x.dim() != expected_ndim:
                raise ValueError(
                    f'inputs[{i}] has shape {tuple(x.shape)}; in_type='
                    f'{self.in_type!r} expects {expected_ndim} dims '
                    f"({'(B, C)' if expected_ndim == 2 else '(B, 1 + L, C)'})")
        if self.in_type == 'cls_token':
            parts = list(inputs)
        else:
            parts = [x[:, 0] for x in inputs]
            if self.avgpool_patch_tokens:
                parts.append(inputs[-1][:, 1:].mean(dim=1))
        return (torch.cat(parts, dim=1), )
