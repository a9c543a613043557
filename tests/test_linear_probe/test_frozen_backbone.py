import pytest
import torch

from dinomamba_mm.checkpoints import backbone_weights, find_backbone_weights
from dinomamba_mm.models.backbones.frozen_backbone import FrozenBackbone

VIT = dict(type='mmpretrain.VisionTransformer',
           arch=dict(embed_dims=16, num_layers=1, num_heads=2,
                     feedforward_channels=32),
           img_size=32, patch_size=16, drop_path_rate=0.5)


def _random_vit_state(seed):
    torch.manual_seed(seed)
    model = FrozenBackbone(VIT)
    model.init_weights()
    return {k: torch.randn_like(v) for k, v in
            model.backbone.state_dict().items()}


def test_loads_teacher_not_student_from_our_dino_checkpoint(tmp_path):
    student, teacher = _random_vit_state(0), _random_vit_state(1)
    state = {f'backbone.{k}': v for k, v in student.items()}
    state.update({f'teacher.backbone.{k}': v for k, v in teacher.items()})
    state['teacher.neck.w'] = torch.zeros(1)
    path = tmp_path / 'dino.pth'
    torch.save(dict(state_dict=state, meta=dict(epoch=1)), path)
    model = FrozenBackbone(VIT, checkpoint=str(path))
    model.init_weights()
    for key, value in model.backbone.state_dict().items():
        torch.testing.assert_close(value, teacher[key])


def test_loads_dino_reference_layout_with_ddp_prefix():
    teacher = {'module.backbone.a': torch.ones(1), 'module.head.b': torch.zeros(1)}
    weights = find_backbone_weights({'teacher': teacher, 'student': {}, 'epoch': 3}, 'c')
    assert list(weights.state_dict) == ['a'] and weights.module_path == 'teacher'


def test_plain_backbone_checkpoint_and_explicit_prefix(monkeypatch):
    logged = []
    monkeypatch.setattr(backbone_weights, 'print_log',
                        lambda msg, **kwargs: logged.append(msg))
    ckpt = dict(state_dict={'backbone.a': torch.ones(1)})
    assert list(find_backbone_weights(ckpt, 'student.pth').state_dict) == ['a']
    # not a DINO teacher for sure (a student, a supervised model): the log says what was taken
    assert logged == ['student.pth has no teacher.* keys; loading its backbone. keys as the '
                      'backbone']
    assert list(find_backbone_weights({'a': torch.ones(1)}, 'c', prefix='').state_dict) == ['a']


def test_checkpoint_without_teacher_names_file_and_keys(tmp_path):
    path = tmp_path / 'classifier.pth'
    torch.save(dict(state_dict={'head.fc.weight': torch.zeros(2, 2)},
                    meta={}), path)
    model = FrozenBackbone(VIT, checkpoint=str(path))
    with pytest.raises(ValueError) as info:
        model.init_weights()
    assert str(path) in str(info.value)
    assert 'head.fc.weight' in str(info.value)


def test_dino_checkpoint_with_only_student_is_rejected():
    # teacher.* keys exist but no teacher backbone: never fall back to the student
    ckpt = dict(state_dict={'backbone.a': torch.ones(1),
                            'teacher.neck.b': torch.ones(1)})
    with pytest.raises(ValueError, match='teacher.backbone.'):
        find_backbone_weights(ckpt, 'x.pth')


def test_wrong_architecture_is_an_error(tmp_path):
    path = tmp_path / 'other.pth'
    torch.save(dict(state_dict={'backbone.unrelated': torch.zeros(1)}), path)
    model = FrozenBackbone(VIT, checkpoint=str(path))
    with pytest.raises(ValueError, match='none of the 18 keys of VisionTransformer is in it'):
        model.init_weights()


def test_frozen_eval_and_no_grad():
    model = FrozenBackbone(VIT)
    model.init_weights()
    model.train()
    assert not model.backbone.training
    assert not any(p.requires_grad for p in model.parameters())
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    out = model(x)
    assert not out[0].requires_grad
    # eval mode: drop path 0.5 is off, so two calls agree exactly
    torch.testing.assert_close(model(x)[0], out[0])


def test_a_backbone_whose_checkpoint_was_never_loaded_refuses_to_run(tmp_path):
    """mmpretrain's get_model builds a model without init_weights(): the FrozenBackbone's
    teacher stayed random and its features were scored (0 of 365 tensors loaded)."""
    teacher = _random_vit_state(1)
    path = tmp_path / 'teacher.pth'
    torch.save(dict(state_dict={f'teacher.backbone.{k}': v for k, v in teacher.items()}), path)
    images = torch.randn(1, 3, 32, 32)
    model = FrozenBackbone(VIT, checkpoint=str(path))
    with pytest.raises(RuntimeError) as info:
        model(images)
    assert str(info.value).startswith(
        f"FrozenBackbone: the weights of its VisionTransformer were never loaded from "
        f"checkpoint='{path}'")
    assert 'call model.init_weights()' in str(info.value)
    model.init_weights()
    expected = model(images)
    # a state dict holding every key of the backbone (a classifier's checkpoint) loads it too
    other = FrozenBackbone(VIT, checkpoint=str(path))
    other.load_state_dict({f'backbone.{k}': v for k, v in model.backbone.state_dict().items()})
    torch.testing.assert_close(other(images), expected)
    partial = FrozenBackbone(VIT, checkpoint=str(path))
    partial.load_state_dict({'backbone.cls_token': teacher['cls_token']}, strict=False)
    with pytest.raises(RuntimeError, match='never loaded'):
        partial(images)
    FrozenBackbone(VIT)(images)  # checkpoint=None: random features on purpose
