from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'CheckedPretrainedInit': '.checked_pretrained',
    'DinoVim': '.dinovim',
    'DinoMambaReg': '.dinovim',
    'FrozenBackbone': '.frozen_backbone',
    'LinearViT': '.linear_vit',
    'PaperCheckpointInit': '.paper_checkpoint',
    'backbone_state_dict': '.checkpoint_mapping',
    'infer_arch': '.checkpoint_mapping',
    'load_state_dict_strict': '.checkpoint_mapping',
    'ours_to_paper': '.checkpoint_mapping',
    'paper_backbone_state_dict': '.checkpoint_mapping',
    'paper_to_ours': '.checkpoint_mapping',
    'LAYOUT_META_KEY': '.layout_record',
    'backbone_layout': '.layout_record',
    'check_layout': '.layout_record',
    'checkpoint_layout': '.layout_record',
    'model_layouts': '.layout_record',
    'paper_layout': '.layout_record',
})
