from .bidirectional_mamba2 import (MIXING_MATRIX_KEYS, BidirectionalMamba2Mixer,
                                   inverse_softplus_dt)
from .gated_rms_norm import GatedRMSNorm
from .linear_attention import LinearMultiheadAttention
from .mamba_block import MambaBlock
from .pos_embed import resize_pos_embed

__all__ = [
    'BidirectionalMamba2Mixer', 'MIXING_MATRIX_KEYS', 'inverse_softplus_dt', 'GatedRMSNorm',
    'LinearMultiheadAttention', 'MambaBlock', 'resize_pos_embed'
]
