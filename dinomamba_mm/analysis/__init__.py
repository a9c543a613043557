"""The paper's analyses: class-token maps, token-mixing matrices and their ranks."""
from .class_token_map_model import ClassTokenMapModel
from .class_token_maps import (ClassTokenMaps, class_token_attention, class_token_similarity,
                               extract_class_token_maps)
from .matrix_rank import block_ranks, default_block_size, effective_rank, numerical_rank
from .mixing_matrix import capture_mixer_inputs, find_mixer, mixer_mixing_matrices
from .token_layout import TokenLayout, token_layout

__all__ = [
    'ClassTokenMapModel', 'ClassTokenMaps', 'class_token_attention', 'class_token_similarity',
    'extract_class_token_maps', 'capture_mixer_inputs', 'find_mixer', 'mixer_mixing_matrices',
    'block_ranks', 'default_block_size', 'effective_rank', 'numerical_rank', 'TokenLayout',
    'token_layout'
]
