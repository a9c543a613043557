"""The one mapping between Dino-Mamba paper checkpoints and DinoVim / DinoMambaReg state dicts.

Paper checkpoints (Hugging Face ``TimingYang/Dino-Mamba``: Vim/Tiny, Vim/Small, Vim/Base,
Mambar/Base) are DINO ``checkpoint.pth`` files holding the ``'teacher'`` (keys ``backbone.*``) and
``'student'`` (keys ``module.backbone.*``) state dicts of the DINO wrapper; the DINO head sits
under ``head.`` and is dropped. Backbone keys, paper -> ours:

=================================  ===================================================
``patch_embed.proj.{weight,bias}``  ``patch_embed.projection.{weight,bias}``
``cls_token`` (1, 1, C), Vim        ``cls_token``
``cls_token`` (1, R, C), MambaR     ``register_tokens``
``pos_embed`` (1, 1 + N, C), Vim    ``pos_embed``
``pos_embed_cls`` (1, R, C) and     ``pos_embed`` (1, R + N, C) = their concatenation
``pos_embed`` (1, N, C), MambaR
``layers.{i}.norm.weight``          unchanged
``layers.{i}.mixer.*``              unchanged (``in_proj``, ``conv1d``, ``conv1d_b``,
                                    ``dt_bias``, ``dt_b_bias``, ``A_log``, ``A_log_b``,
                                    ``D``, ``D_b``, ``norm``, ``norm_b``, ``out_proj``)
``norm_f.weight``                   unchanged
``head.{weight,bias}``              dropped: VisionMamba's classifier (built with its default
                                    num_classes=1000 in Vim checkpoints), never trained by
                                    DINO, whose features skip it
=================================  ===================================================

The paper's checkpoints reproduce its features with ``token_layout='paper'`` (Vim: its token
order; both: DINO's resize convention) and, for MambaR, ``img_size=112`` (its 7x7 table);
loading them into another token layout is an error (:mod:`.layout`). Every loader renames
them through :func:`.backbone_weights.find_backbone_weights`.
"""
from collections import OrderedDict
from typing import Dict, Mapping

import torch

_PATCH_PAPER, _PATCH_OURS = 'patch_embed.proj.', 'patch_embed.projection.'
_UNUSED_PAPER_PREFIX = 'head.'

StateDict = Dict[str, torch.Tensor]


def is_paper_layout(state_dict: Mapping) -> bool:
    """True for a backbone state dict in the paper's key layout."""
    return any(k.startswith(_PATCH_PAPER) for k in state_dict)


def paper_to_ours(state_dict: Mapping) -> StateDict:
    """Paper backbone keys -> DinoVim / DinoMambaReg keys (see the module table)."""
    out = OrderedDict()
    registers = 'pos_embed_cls' in state_dict
    for key, value in state_dict.items():
        if key == 'pos_embed_cls' or key.startswith(_UNUSED_PAPER_PREFIX):
            continue
        if key == 'pos_embed' and registers:
            value = torch.cat((state_dict['pos_embed_cls'], value), dim=1)
        elif key == 'cls_token' and registers:
            key = 'register_tokens'
        elif key.startswith(_PATCH_PAPER):
            key = _PATCH_OURS + key[len(_PATCH_PAPER):]
        out[key] = value
    return out


def infer_arch(state_dict: Mapping) -> dict:
    """DinoVim arch dict and num_registers of a backbone state dict in our layout.

    ngroups cannot be told apart from d_state in the shapes; 1 (the paper's) is assumed.
    """
    layer_ids = {int(k.split('.')[1]) for k in state_dict if k.startswith('layers.')}
    if not layer_ids:
        raise ValueError('state dict has no layers.* keys; is it a DinoVim backbone?')
    embed_dims = state_dict['pos_embed'].shape[-1]
    out_proj = state_dict['layers.0.mixer.out_proj.weight']
    d_inner = out_proj.shape[1]
    heads = state_dict['layers.0.mixer.A_log'].shape[0]
    conv_weight = state_dict['layers.0.mixer.conv1d.weight']
    arch = dict(embed_dims=embed_dims, num_layers=max(layer_ids) + 1, headdim=d_inner // heads,
                d_state=(conv_weight.shape[0] - d_inner) // 2, expand=d_inner // embed_dims,
                ngroups=1, d_conv=conv_weight.shape[-1])
    registers = state_dict.get('register_tokens')
    return dict(arch=arch, num_registers=0 if registers is None else registers.shape[1],
                patch_size=state_dict[_PATCH_OURS + 'weight'].shape[-1])
