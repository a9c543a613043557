from .bidirectional_mamba2 import (MIXING_MATRIX_KEYS, BidirectionalMamba2Mixer,
                                   inverse_softplus_dt)
from .gated_rms_norm import GatedRMSNorm
from .linear_attention import LinearMultiheadAttention
from .mamba_block import DEFAULT_MIXER, MambaBlock
from .pos_embed import resize_pos_embed
from .softmax_attention import SoftmaxAttention
from .token_mixer import mixing_matrix_of, register_mixing_matrix

__all__ = [
    'BidirectionalMamba2Mixer', 'MIXING_MATRIX_KEYS', 'inverse_softplus_dt', 'GatedRMSNorm',
    'LinearMultiheadAttention', 'DEFAULT_MIXER', 'MambaBlock', 'resize_pos_embed',
    'SoftmaxAttention', 'mixing_matrix_of', 'register_mixing_matrix'
]
