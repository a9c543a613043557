from .class_token_map_model import ClassTokenMapModel
from .class_token_maps import (ClassTokenMaps, class_token_attention, class_token_similarity,
                               extract_class_token_maps)
from .mixing_matrix import (capture_mixer_inputs, find_mixer, linear_attention_matrix,
                            mamba_mixing_matrices, mixer_mixing_matrices,
                            softmax_attention_matrix)
from .matrix_rank import (block_ranks, default_block_size, effective_rank, numerical_rank,
                          singular_values)
from .token_layout import TokenLayout, token_layout

__all__ = [
    'ClassTokenMapModel', 'block_ranks', 'default_block_size', 'effective_rank',
    'numerical_rank', 'singular_values',
    'ClassTokenMaps', 'class_token_attention', 'class_token_similarity',
    'extract_class_token_maps', 'capture_mixer_inputs', 'find_mixer',
    'linear_attention_matrix', 'mamba_mixing_matrices', 'mixer_mixing_matrices',
    'softmax_attention_matrix', 'TokenLayout', 'token_layout'
]
