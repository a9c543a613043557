"""DINO algorithm: EMA teacher, multi-crop forward, optimizer exclusion, teacher features."""
import re

import numpy as np
import pytest
import torch
from mmengine.optim import DefaultOptimWrapperConstructor

import dinomamba_mm  # noqa: F401
from dinomamba_mm.registry import MODELS

VIT = dict(type='mmpretrain.VisionTransformer',
           arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32),
           img_size=32, patch_size=8, out_type='cls_token', drop_path_rate=0.1)
DINOVIM = dict(type='dinomamba_mm.DinoVim',
               arch=dict(embed_dims=16, num_layers=2, headdim=8, d_state=4),
               img_size=32, patch_size=8, out_type='cls_token', drop_path_rate=0.1)
K = 12


def build(backbone=VIT, **kwargs):
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='DINO', **kwargs,
        backbone=backbone,
        neck=dict(type='dinomamba_mm.DINOProjectionHead', in_channels=16, out_channels=K,
                  hidden_channels=24, bottleneck_channels=8),
        head=dict(type='dinomamba_mm.DINOLossHead', out_channels=K, teacher_temp=0.05),
        data_preprocessor=dict(type='mmpretrain.SelfSupDataPreprocessor',
                               mean=[0., 0., 0.], std=[1., 1., 1.])))
    model.init_weights()
    return model


def crops(batch=2, num_global=2, num_local=3):
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(batch, 3, 32, 32, generator=g) for _ in range(num_global)]
            + [torch.randn(batch, 3, 16, 16, generator=g) for _ in range(num_local)])


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize('backbone', [VIT, DINOVIM], ids=['vit', 'dinovim'])
def test_teacher_is_frozen_copy_in_eval_mode(backbone):
    model = build(backbone)
    student = {**{f'backbone.{k}': v for k, v in model.backbone.state_dict().items()},
               **{f'neck.{k}': v for k, v in model.neck.state_dict().items()}}
    teacher = model.teacher.state_dict()
    assert set(teacher) == set(student)
    assert all(torch.equal(teacher[k], student[k]) for k in student)
    assert not any(p.requires_grad for p in model.teacher.parameters())
    model.train()
    assert model.backbone.training and not model.teacher.training
    assert not any(m.training for m in model.teacher.modules())
    keys = model.state_dict().keys()
    assert {'momentum', 'head.center', 'head.teacher_temp'} <= set(keys)
    assert any(k.startswith('teacher.backbone.') for k in keys)


def test_optimizer_never_sees_teacher():
    model = build()
    constructor = DefaultOptimWrapperConstructor(
        dict(type='OptimWrapper',
             optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.04)),
        paramwise_cfg=dict(bias_decay_mult=0., flat_decay_mult=0.))
    optim = constructor(model)
    in_optimizer = {id(p): g['weight_decay'] for g in optim.param_groups for p in g['params']}
    names = dict(model.named_parameters())
    for name, param in names.items():
        if name.startswith('teacher.') or name.endswith('original0'):
            assert id(param) not in in_optimizer, name
        else:
            assert id(param) in in_optimizer, name
            expected = 0. if (name.endswith('bias') or param.ndim == 1) else 0.04
            assert in_optimizer[id(param)] == expected, name


def test_update_teacher_is_ema():
    model = build()
    with torch.no_grad():
        for p in [*model.backbone.parameters(), *model.neck.parameters()]:
            p.add_(torch.randn_like(p))
    before_t = {k: v.double().clone() for k, v in model.teacher.state_dict().items()}
    student = {**{f'backbone.{k}': v.double() for k, v in model.backbone.state_dict().items()},
               **{f'neck.{k}': v.double() for k, v in model.neck.state_dict().items()}}
    m = 0.9
    model.update_teacher(m)
    after = model.teacher.state_dict()
    for key, old in before_t.items():
        np.testing.assert_allclose(after[key].double().numpy(),
                                   (m * old + (1 - m) * student[key]).numpy(),
                                   rtol=1e-6, atol=1e-7, err_msg=key)
    assert model.momentum.item() == pytest.approx(m)
    with pytest.raises(ValueError, match='momentum'):
        model.update_teacher(1.5)


@pytest.mark.parametrize('num_local', [3, 0], ids=['multi-crop', 'global-crops-only'])
def test_loss_equals_per_crop_computation_and_batches_by_resolution(num_local):
    model = build()
    model.train()
    with torch.no_grad():  # a teacher different from the student, and a non-zero centre
        for p in model.teacher.parameters():
            p.add_(0.05 * torch.randn_like(p))
        model.head.center.normal_()
    inputs = crops(num_local=num_local)
    calls = {'student': [], 'teacher': []}
    model.backbone.register_forward_hook(
        lambda m, i, o: calls['student'].append(i[0].shape[0]))
    model.teacher['backbone'].register_forward_hook(
        lambda m, i, o: calls['teacher'].append(i[0].shape[0]))
    model.eval()  # no drop path: the second formulation below must see the same network
    center = model.head.center.double().numpy().copy()
    loss = model.loss(inputs)['loss']
    # 2 global (+ 3 local) crops, B = 2: one backbone call per crop resolution
    assert calls == {'student': [4, 6] if num_local else [4], 'teacher': [4]}

    with torch.no_grad():  # second formulation: every crop on its own, float64 numpy loss
        def scores(backbone, neck, crop):
            return neck(backbone(crop)[-1]).double().numpy()
        t = [scores(model.teacher['backbone'], model.teacher['neck'], c) for c in inputs[:2]]
        s = [scores(model.backbone, model.neck, c) for c in inputs]
    total, pairs = 0.0, 0
    for i, ti in enumerate(t):
        p_t = _softmax((ti - center) / 0.05)
        for j, sj in enumerate(s):
            if i != j:
                total += np.mean(np.sum(-p_t * np.log(_softmax(sj / 0.1)), axis=-1))
                pairs += 1
    assert pairs == 2 * (1 + num_local)
    assert loss.item() == pytest.approx(total / pairs, rel=1e-5)


@pytest.mark.parametrize('backbone', [VIT, DINOVIM], ids=['vit', 'dinovim'])
def test_gradients_reach_student_only(backbone):
    model = build(backbone)
    model.train()
    out = model.loss(crops())
    assert set(out) == {'loss', 'teacher_temp', 'teacher_momentum'}
    out['loss'].backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    grads = [p.grad for p in model.backbone.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)
    assert model.neck.last_layer.parametrizations.weight.original1.grad.abs().sum() > 0


def test_extract_feat_uses_teacher_backbone():
    model = build()
    model.eval()
    with torch.no_grad():
        for p in model.teacher['backbone'].parameters():
            p.add_(0.1)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        feats = model(x, mode='tensor')
        assert torch.equal(feats[-1], model.teacher['backbone'](x)[-1])
        assert not torch.allclose(feats[-1], model.backbone(x)[-1])


def test_bad_input():
    model = build()
    with pytest.raises(TypeError, match='list of crops'):
        model.loss(torch.zeros(2, 3, 32, 32))
    with pytest.raises(ValueError, match='num_teacher_crops=2 crops and at least 2'):
        model.loss(crops(num_global=1, num_local=0))
    with pytest.raises(ValueError, match=r'\(B, C, H, W\) with one B'):
        model.loss([torch.zeros(2, 3, 32, 32), torch.zeros(3, 3, 32, 32),
                    torch.zeros(2, 3, 16, 16)])


def test_pretrained_keeps_the_checkpoint_teacher(tmp_path):
    source = build()
    with torch.no_grad():
        for p in source.teacher.parameters():
            p.add_(0.5)
    path = str(tmp_path / 'dino.pth')
    torch.save(dict(state_dict=source.state_dict()), path)
    torch.manual_seed(1)
    model = MODELS.build(dict(
        type='DINO', backbone=VIT, pretrained=path,
        neck=dict(type='dinomamba_mm.DINOProjectionHead', in_channels=16, out_channels=K,
                  hidden_channels=24, bottleneck_channels=8),
        head=dict(type='dinomamba_mm.DINOLossHead', out_channels=K)))
    model.init_weights()
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


@pytest.mark.parametrize('dropped', ['teacher.', 'head.center'])
def test_pretrained_without_some_keys_is_an_error(tmp_path, dropped):
    """mmengine's Pretrained init only logs missing keys; a teacher left at its construction
    weights (or a missing centre) must stop the run, naming the checkpoint and the keys."""
    source = build()
    state = {k: v for k, v in source.state_dict().items() if not k.startswith(dropped)}
    path = str(tmp_path / 'dino.pth')
    torch.save(dict(state_dict=state), path)
    model = MODELS.build(dict(
        type='DINO', backbone=VIT, pretrained=path,
        neck=dict(type='dinomamba_mm.DINOProjectionHead', in_channels=16, out_channels=K,
                  hidden_channels=24, bottleneck_channels=8),
        head=dict(type='dinomamba_mm.DINOLossHead', out_channels=K)))
    with pytest.raises(ValueError, match=f"{re.escape(path)}.*keys of the model are missing.*"
                                         f"{dropped}"):
        model.init_weights()


@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_a_non_finite_student_never_reaches_the_teacher(bad):
    model = build(DINOVIM)
    before = {k: v.clone() for k, v in model.teacher.state_dict().items()}
    with torch.no_grad():
        model.neck.last_layer.parametrizations.weight.original1[0, 0] = bad
    with pytest.raises(FloatingPointError) as info:
        model.update_teacher(0.9)
    assert str(info.value).startswith(
        '1 of ') and 'neck.last_layer.parametrizations.weight.original1' in str(info.value)
    assert 'the teacher was not updated' in str(info.value)
    for key, value in model.teacher.state_dict().items():
        assert torch.equal(value, before[key]), key


def _paper_step(student_backbone, student_neck, inputs, lr, momentum, teacher_temp,
                student_temp=0.1):
    """One iteration of the paper's main_dino_vim.py loop, written out: the teacher is the
    student's copy kept in train mode (drop path on), the multi-crop wrapper runs the backbone
    once per run of same-size crops and the head once, DINO's loss, an SGD step, then the EMA
    ``teacher <- m * teacher + (1 - m) * student``. Returns the loss and both networks."""
    import copy

    import torch.nn.functional as F

    def multi_crop(backbone, neck, crops_):
        sizes = torch.tensor([c.shape[-1] for c in crops_])
        ends = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
        start, outputs = 0, []
        for end in ends.tolist():
            out = backbone(torch.cat(crops_[start:end]))
            outputs.append(out[-1] if isinstance(out, tuple) else out)
            start = end
        return neck(torch.cat(outputs))

    student = torch.nn.ModuleList([student_backbone, student_neck])
    teacher = copy.deepcopy(student)
    student.train()
    teacher.train()  # the paper never calls teacher.eval()
    with torch.no_grad():
        teacher_out = multi_crop(teacher[0], teacher[1], inputs[:2])
    student_out = multi_crop(student[0], student[1], inputs)
    student_chunks = (student_out / student_temp).chunk(len(inputs))
    teacher_chunks = F.softmax(teacher_out / teacher_temp, dim=-1).chunk(2)  # centre = 0
    total, pairs = 0, 0
    for iq, q in enumerate(teacher_chunks):
        for v, s in enumerate(student_chunks):
            if v != iq:
                total = total + torch.sum(-q * F.log_softmax(s, dim=-1), dim=-1).mean()
                pairs += 1
    loss = total / pairs
    optimizer = torch.optim.SGD(student.parameters(), lr=lr)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for param_q, param_k in zip(student.parameters(), teacher.parameters()):
            param_k.data.mul_(momentum).add_((1 - momentum) * param_q.detach().data)
    return loss, student, teacher


@pytest.mark.parametrize('backbone', [VIT, DINOVIM], ids=['vit', 'dinovim'])
def test_teacher_mode_train_is_one_step_of_the_papers_loop(backbone):
    import copy

    model = build(backbone, teacher_mode='train')
    lr, base_momentum, final_momentum, max_iters = 0.5, 0.996, 1.0, 10
    # DINO's cosine_scheduler(base, final) at iteration 0 of max_iters
    momentum = final_momentum + 0.5 * (base_momentum - final_momentum) * (1 + np.cos(0.0))
    inputs = crops()
    reference_backbone = copy.deepcopy(model.backbone)
    reference_neck = copy.deepcopy(model.neck)
    before = {**{k: v.clone() for k, v in reference_backbone.state_dict().items()},
              **{f'neck.{k}': v.clone() for k, v in reference_neck.state_dict().items()}}

    torch.manual_seed(7)
    ref_loss, ref_student, ref_teacher = _paper_step(
        reference_backbone, reference_neck, inputs, lr, momentum,
        teacher_temp=model.head.teacher_temp.item())

    model.train()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    torch.manual_seed(7)
    loss = model.loss(inputs)['loss']
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    model.update_teacher(momentum)

    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
    ours = {**{f'student.{k}': v for k, v in model.backbone.state_dict().items()},
            **{f'student.neck.{k}': v for k, v in model.neck.state_dict().items()},
            **{f'teacher.{k}': v for k, v in model.teacher['backbone'].state_dict().items()},
            **{f'teacher.neck.{k}': v for k, v in model.teacher['neck'].state_dict().items()}}
    reference = {**{f'student.{k}': v for k, v in ref_student[0].state_dict().items()},
                 **{f'student.neck.{k}': v for k, v in ref_student[1].state_dict().items()},
                 **{f'teacher.{k}': v for k, v in ref_teacher[0].state_dict().items()},
                 **{f'teacher.neck.{k}': v for k, v in ref_teacher[1].state_dict().items()}}
    assert ours.keys() == reference.keys()
    for key, value in reference.items():
        # float32 rounding, bounded by the size of the tensor and of its update (up to ~10 at
        # lr 0.5: an element that ends near 0 carries the update's rounding); a wrong step is
        # off by the update itself
        start = before[key.split('.', 1)[1]]
        scale = max(value.abs().max().item(), (value - start).abs().max().item())
        torch.testing.assert_close(ours[key], value, rtol=0, atol=1e-5 * scale,
                                   msg=lambda m, key=key: f"{key}: {m}")
    assert all(m.training for m in model.teacher.modules())

    model.eval()  # evaluation and extract_feat: deterministic teacher in either mode
    assert not any(m.training for m in model.teacher.modules())


def test_teacher_mode_eval_keeps_the_teacher_deterministic_and_bad_modes_are_refused():
    model = build(DINOVIM)
    model.train()
    assert model.backbone.training and not model.teacher.training
    with pytest.raises(ValueError, match="teacher_mode must be one of .*got 'ema'"):
        MODELS.build(dict(type='DINO', backbone=VIT, teacher_mode='ema',
                          neck=dict(type='dinomamba_mm.DINOProjectionHead', in_channels=16,
                                    out_channels=K, hidden_channels=24, bottleneck_channels=8),
                          head=dict(type='dinomamba_mm.DINOLossHead', out_channels=K)))
