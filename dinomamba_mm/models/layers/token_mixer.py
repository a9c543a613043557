"""The token-mixer interface: the paper's Y = M X, and how a module class outside ours joins it.

A token mixer maps the normalised tokens x (B, L, D) of a block to (B, L, D). The registered
mixers (``MODELS``, scope 'dinomamba_mm': ``BidirectionalMamba2Mixer``, ``LinearMultiheadAttention``,
``SoftmaxAttention``) are built from ``mixer_cfg=dict(type=..., ...)`` with ``embed_dims`` given
by the block, and implement:

- ``mixing_matrix(x, rows=None)``: the matrices M of ``Y = M X`` for the input x (B, L, D), as an
  ordered dict {name: (B, H, R, L) float32} with H heads and R = L query rows (``rows``, an index
  tensor or slice into the L rows, keeps R of them). Attention has one matrix ('softmax',
  'linear'), the bidirectional Mamba-2 mixer one per direction and their average ('forward',
  'backward', 'combined'). Every mixer returns the same kind of object, so the analysis iterates
  over named matrices whatever the mixer; the names label the rank tables and the map channels.
  This is the one interface the analysis (``dinomamba_mm.analysis``) uses;
- ``init_residual_output(num_layers)``: the paper code's initialisation of the layer that writes
  into the residual stream, for a stack of ``num_layers`` blocks (:func:`depth_scaled_init_`);
  DinoVim calls it after its own initialisation;
- ``activation_elements(length)``: (working, kept), the elements per sample a forward over
  ``length`` tokens holds at once, and what autograd keeps of it for the backward pass; DinoVim's
  ``activation_bytes`` adds them up.

A module class that is not ours gets ``mixing_matrix`` by registration
(:func:`register_mixing_matrix`) instead of a subclass or a copy: mmpretrain's
``VisionTransformer`` builds its ``MultiheadAttention`` itself, and its state-dict keys stay.
"""
import math
from functools import partial
from typing import Callable, Dict, Optional, Union

import torch
import torch.nn as nn

#: the query rows of ``mixing_matrix``: an index tensor or a slice into the L rows, None for all
Rows = Optional[Union[torch.Tensor, slice]]
MixingMatrix = Callable[..., Dict[str, torch.Tensor]]

#: ``mixing_matrix(module, x, rows=None)`` functions of module classes that are not ours, by class
_REGISTERED_MIXING_MATRICES: Dict[type, MixingMatrix] = {}


def register_mixing_matrix(module_class: type) -> Callable[[MixingMatrix], MixingMatrix]:
    """Decorator: give instances of exactly ``module_class`` (not its subclasses, whose forward
    may mix otherwise) the interface ``mixing_matrix(x, rows=None)`` by the decorated function
    ``fn(module, x, rows=None)``."""

    def register(function: MixingMatrix) -> MixingMatrix:
        if module_class in _REGISTERED_MIXING_MATRICES:
            raise KeyError(f'a mixing matrix is already registered for {module_class.__name__}')
        _REGISTERED_MIXING_MATRICES[module_class] = function
        return function

    return register


def mixing_matrix_of(module: nn.Module) -> Optional[MixingMatrix]:
    """``module``'s ``mixing_matrix(x, rows=None)``: its own method, else the function registered
    for its class; None for a module that is no token mixer."""
    method = getattr(module, 'mixing_matrix', None)
    if callable(method):
        return method
    function = _REGISTERED_MIXING_MATRICES.get(type(module))
    return None if function is None else partial(function, module)


def depth_scaled_init_(linear: nn.Linear, num_layers: int) -> None:
    """Kaiming-uniform weight (a = sqrt(5), torch's default for ``nn.Linear``) divided by
    sqrt(num_layers): the rescaled pre-norm residual initialisation of the paper code (Vim /
    Mamba-2) for the layer of each block that writes into the residual stream."""
    nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5))
    with torch.no_grad():
        linear.weight /= math.sqrt(num_layers)
