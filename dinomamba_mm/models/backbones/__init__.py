from .checked_pretrained import CheckedPretrainedInit
from .checkpoint_mapping import (backbone_state_dict, infer_arch, load_state_dict_strict,
                                 ours_to_paper, paper_backbone_state_dict, paper_to_ours)
from .dinovim import DinoMambaReg, DinoVim
from .frozen_backbone import FrozenBackbone
from .layout_record import (LAYOUT_META_KEY, backbone_layout, check_layout, checkpoint_layout,
                            model_layouts, paper_layout)
from .linear_vit import LinearViT
from .paper_checkpoint import PaperCheckpointInit

__all__ = [
    'CheckedPretrainedInit', 'DinoVim', 'DinoMambaReg', 'FrozenBackbone', 'LinearViT',
    'PaperCheckpointInit', 'backbone_state_dict', 'infer_arch', 'load_state_dict_strict',
    'ours_to_paper', 'paper_backbone_state_dict', 'paper_to_ours', 'LAYOUT_META_KEY',
    'backbone_layout', 'check_layout', 'checkpoint_layout', 'model_layouts', 'paper_layout'
]
