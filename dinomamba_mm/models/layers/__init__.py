from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'BidirectionalMamba2Mixer': '.bidirectional_mamba2',
    'MIXING_MATRIX_KEYS': '.bidirectional_mamba2',
    'inverse_softplus_dt': '.bidirectional_mamba2',
    'GatedRMSNorm': '.gated_rms_norm',
    'LinearMultiheadAttention': '.linear_attention',
    'MambaBlock': '.mamba_block',
    'resize_pos_embed': '.pos_embed',
})
