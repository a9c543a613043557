"""Files in the formats the Dino-Mamba paper code writes, with random values and small dims.

- ``paper_backbone``: backbone keys of its VisionMamba (Vim) / MambaR (models_vim.py /
  models_mambar.py names: ``patch_embed.proj``, ``cls_token``, MambaR's ``pos_embed_cls`` and
  register-less ``pos_embed``);
- ``ours_to_paper``: a DinoVim / DinoMambaReg state dict in those key names;
- ``paper_dino_checkpoint``: main_dino's ``checkpoint.pth`` ('teacher' with ``backbone.*`` and the
  DINO head, 'student' saved from DistributedDataParallel with ``module.backbone.*``, epoch, args);
- ``paper_linear_head``: eval_linear's ``checkpoint.pth.tar`` (its LinearClassifier saved from
  DistributedDataParallel: ``module.linear.weight`` / ``.bias``; epoch, best_acc, SGD and
  cosine-scheduler states).
"""
import argparse
from typing import Optional

import torch

DIM, DEPTH, STATE, HEADDIM = 32, 2, 8, 8


def paper_backbone(seed: int, registers: int = 0, patches: int = 196, dim: int = DIM,
                   depth: int = DEPTH, state: int = STATE, headdim: int = HEADDIM,
                   pos_scale: float = 1.) -> dict:
    """Backbone keys of the paper's Vim (a class token) or MambaR (``registers`` > 0)."""
    gen = torch.Generator().manual_seed(seed)
    d_inner, heads = 2 * dim, 2 * dim // headdim
    conv = d_inner + 2 * state
    shapes = {'patch_embed.proj.weight': (dim, 3, 16, 16), 'patch_embed.proj.bias': (dim, )}
    if registers:
        shapes.update({'cls_token': (1, registers, dim), 'pos_embed_cls': (1, registers, dim),
                       'pos_embed': (1, patches, dim)})
    else:
        shapes.update({'cls_token': (1, 1, dim), 'pos_embed': (1, 1 + patches, dim),
                       'head.weight': (10, dim), 'head.bias': (10, )})
    for i in range(depth):
        p = f'layers.{i}.'
        shapes[p + 'norm.weight'] = (dim, )
        for name, shape in (('in_proj.weight', (2 * d_inner + 2 * state + heads, dim)),
                            ('conv1d.weight', (conv, 1, 4)), ('conv1d.bias', (conv, )),
                            ('conv1d_b.weight', (conv, 1, 4)), ('conv1d_b.bias', (conv, )),
                            ('dt_bias', (heads, )), ('dt_b_bias', (heads, )),
                            ('A_log', (heads, )), ('A_log_b', (heads, )), ('D', (heads, )),
                            ('D_b', (heads, )), ('norm.weight', (d_inner, )),
                            ('norm_b.weight', (d_inner, )), ('out_proj.weight', (dim, d_inner))):
            shapes[p + 'mixer.' + name] = shape
    shapes['norm_f.weight'] = (dim, )
    backbone = {k: torch.randn(shape, generator=gen) for k, shape in shapes.items()}
    backbone['pos_embed'] *= pos_scale
    return backbone


def ours_to_paper(state_dict: dict) -> dict:
    """Our backbone keys -> the paper's: ``patch_embed.projection`` -> ``patch_embed.proj``;
    DinoMambaReg's ``register_tokens`` -> ``cls_token`` and its ``pos_embed`` (1, R + N, C) split
    into ``pos_embed_cls`` (1, R, C) and ``pos_embed`` (1, N, C)."""
    out = {}
    registers = state_dict.get('register_tokens')
    for key, value in state_dict.items():
        if key == 'pos_embed' and registers is not None:
            out['pos_embed_cls'] = value[:, :registers.shape[1]]
            value = value[:, registers.shape[1]:]
        elif key == 'register_tokens':
            key = 'cls_token'
        out[key.replace('patch_embed.projection.', 'patch_embed.proj.')] = value
    return out


def paper_dino_checkpoint(teacher: dict, student: Optional[dict] = None) -> dict:
    """main_dino's checkpoint.pth around backbone state dicts (paper key names)."""
    student = teacher if student is None else student
    dim = teacher['norm_f.weight'].shape[0]
    head = {'head.mlp.0.weight': torch.randn(16, dim), 'head.last_layer.weight_g': torch.ones(4)}
    return {
        'teacher': {**{'backbone.' + k: v for k, v in teacher.items()}, **head},
        'student': {**{'module.backbone.' + k: v for k, v in student.items()},
                    **{'module.' + k: v for k, v in head.items()}},
        'epoch': 100,
        'args': argparse.Namespace(arch='vim_tiny_patch16_224', lr=5e-4),
    }


def paper_linear_head(weight: torch.Tensor, bias: torch.Tensor, epoch: int = 100,
                      best_acc: float = 78.1) -> dict:
    """eval_linear's checkpoint.pth.tar holding ``weight`` (num_classes, C) and ``bias``."""
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
    optimizer = torch.optim.SGD(linear.parameters(), lr=1e-3, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epoch, eta_min=0)
    state_dict = {'module.linear.weight': weight, 'module.linear.bias': bias}
    return dict(epoch=epoch, state_dict=state_dict, optimizer=optimizer.state_dict(),
                scheduler=scheduler.state_dict(), best_acc=best_acc)
