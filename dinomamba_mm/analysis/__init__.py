"""The paper's analyses: class-token maps, token-mixing matrices and their ranks."""
from dinomamba_mm.lazy_exports import lazy_exports
from .token_layout import TokenLayout, token_layout

__getattr__, __all__ = lazy_exports(__name__, {
    'ClassTokenMapModel': '.class_token_map_model',
    'ClassTokenMaps': '.class_token_maps',
    'class_token_attention': '.class_token_maps',
    'class_token_similarity': '.class_token_maps',
    'extract_class_token_maps': '.class_token_maps',
    'capture_mixer_inputs': '.mixing_matrix',
    'find_mixer': '.mixing_matrix',
    'linear_attention_matrix': '.mixing_matrix',
    'mamba_mixing_matrices': '.mixing_matrix',
    'mixer_mixing_matrices': '.mixing_matrix',
    'softmax_attention_matrix': '.mixing_matrix',
    'block_ranks': '.matrix_rank',
    'default_block_size': '.matrix_rank',
    'effective_rank': '.matrix_rank',
    'numerical_rank': '.matrix_rank',
})
__all__ += ['TokenLayout', 'token_layout']
