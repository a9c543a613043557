"""load_state_dict_checked: every way a state dict can miss a module, in one error."""
import pytest
import torch
from torch import nn

import dinomamba_mm  # noqa: F401
from dinomamba_mm.checkpoints import (load_state_dict_checked, prefix_hint,
                                      strip_module_prefix)
from dinomamba_mm.models.backbones import DinoVim


def net(width=4):
    return nn.Sequential(nn.Linear(3, width), nn.Linear(width, 2))


def test_a_matching_state_dict_loads():
    source, target = net(), net()
    report = load_state_dict_checked(target, source.state_dict(), 'ckpt', strict=True)
    assert report == ([], [])
    assert all(torch.equal(a, b) for a, b in zip(source.parameters(), target.parameters()))


def test_strict_lists_missing_and_unexpected_keys_with_counts():
    state = net().state_dict()
    state.pop('1.bias')
    state['2.weight'] = torch.zeros(1)
    with pytest.raises(ValueError) as info:
        load_state_dict_checked(net(), state, "checkpoint 'a.pth'", strict=True, advice='Do X')
    assert str(info.value) == ("checkpoint 'a.pth' does not match Sequential: 1 keys of the "
                               "model are missing: [1.bias]; 1 keys are not in the model: "
                               "[2.weight]. Do X")


def test_non_strict_still_refuses_shapes_and_a_state_dict_that_fits_nothing():
    report = load_state_dict_checked(net(), {'0.weight': torch.zeros(4, 3)}, 'c', strict=False)
    assert report.missing == ['0.bias', '1.weight', '1.bias'] and report.unexpected == []
    with pytest.raises(ValueError) as info:
        load_state_dict_checked(net(4), net(8).state_dict(), 'c', strict=False)
    message = str(info.value)
    assert message.startswith('c does not match Sequential: 3 tensors have another shape: ')
    assert 'size mismatch for 0.weight: (8, 3) in the checkpoint, (4, 3) in the model' in message
    wrapped = {f'teacher.backbone.{k}': v for k, v in net().state_dict().items()}
    with pytest.raises(ValueError) as info:
        load_state_dict_checked(net(), wrapped, 'c', strict=False)
    assert str(info.value) == (
        'c does not match Sequential: none of the 4 keys of Sequential is in it (it has 4 '
        'keys, e.g. [teacher.backbone.0.weight, teacher.backbone.0.bias, '
        'teacher.backbone.1.weight, teacher.backbone.1.bias]). Hint: the checkpoint holds 4 of '
        "the 4 expected keys under the prefix 'teacher.backbone.'")


def test_prefix_hint_both_ways():
    model_keys = ['backbone.a.weight', 'backbone.b', 'head.fc.weight']
    assert prefix_hint(['a.weight', 'b'], model_keys) == (
        "the model expects 2 of the checkpoint's 2 keys under the prefix 'backbone.'")
    assert prefix_hint(['x', 'y'], model_keys) is None


def test_long_lists_are_cut_but_counted():
    state = {f'k{i}': torch.zeros(1) for i in range(25)}
    with pytest.raises(ValueError) as info:
        load_state_dict_checked(net(), {**net().state_dict(), **state}, 'c', strict=True)
    assert '25 keys are not in the model: [k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, ...]' \
        in str(info.value)


def test_module_prefix_is_stripped_and_metadata_kept():
    state = net().state_dict()
    wrapped = type(state)((f'module.{k}', v) for k, v in state.items())
    wrapped._metadata = type(state._metadata)(
        (f'module.{k}' if k else 'module', v) for k, v in state._metadata.items())
    stripped = strip_module_prefix(wrapped)  # a DDP state dict: its module paths stripped too
    assert list(stripped) == list(state) and stripped._metadata == state._metadata


def test_dinovim_position_embedding_is_resized_not_refused():
    arch = dict(embed_dims=16, num_layers=1, headdim=8, d_state=4)
    small, large = DinoVim(arch=arch, img_size=32, patch_size=8), \
        DinoVim(arch=arch, img_size=64, patch_size=8)
    load_state_dict_checked(large, small.state_dict(), 'c', strict=True)
    assert large.pos_embed.shape == (1, 65, 16)
