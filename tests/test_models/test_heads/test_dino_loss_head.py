"""DINOLossHead against a float64 hand computation of DINO's loss and centre update."""
import numpy as np
import pytest
import torch

from dinomamba_mm.models.heads import DINOLossHead
from dinomamba_mm.models.heads import dino_loss_head


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _hand_loss(student, teacher, center, student_temp, teacher_temp):
    """The pairs loop written out: teacher crop i vs student crop j, i != j."""
    total, pairs = 0.0, 0
    for i, t in enumerate(teacher):
        p_t = _softmax((t - center) / teacher_temp)
        for j, s in enumerate(student):
            if i == j:
                continue
            log_p_s = np.log(_softmax(s / student_temp))
            per_sample = [-(p_t[b] * log_p_s[b]).sum() for b in range(t.shape[0])]
            total += sum(per_sample) / len(per_sample)
            pairs += 1
    return total / pairs


def test_loss_matches_hand_computation_and_center_update():
    rng = np.random.default_rng(0)
    batch, k = 3, 7
    student = [rng.normal(size=(batch, k)) for _ in range(4)]
    teacher = [rng.normal(size=(batch, k)) for _ in range(2)]
    center0 = rng.normal(size=(1, k)) * 0.1
    head = DINOLossHead(out_channels=k, student_temp=0.1, teacher_temp=0.07,
                        center_momentum=0.9)
    head.center.copy_(torch.from_numpy(center0))

    loss = head.loss([torch.tensor(s, dtype=torch.float32) for s in student],
                     [torch.tensor(t, dtype=torch.float32) for t in teacher])

    expected = _hand_loss(student, teacher, center0, 0.1, 0.07)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # 2 teacher crops x 4 student crops minus the 2 matching views = 6 pairs; the centre used
    # by the loss is the old one, the update comes after.
    batch_mean = np.concatenate(teacher).mean(axis=0, keepdims=True)
    np.testing.assert_allclose(head.center.numpy(), 0.9 * center0 + 0.1 * batch_mean,
                               rtol=1e-5, atol=1e-7)


def test_student_gets_gradients_teacher_does_not():
    head = DINOLossHead(out_channels=5)
    student = [torch.randn(2, 5, requires_grad=True) for _ in range(3)]
    teacher = [torch.randn(2, 5, requires_grad=True) for _ in range(2)]
    head.loss(student, teacher).backward()
    assert all(s.grad is not None and s.grad.abs().sum() > 0 for s in student)
    assert all(t.grad is None for t in teacher)


def test_center_mean_over_processes(monkeypatch):
    """Simulated all-reduce: a second process holds other teacher scores (and a batch of 1)."""
    k = 4
    local = np.arange(2 * k, dtype=np.float64).reshape(2, k)
    other = np.full((1, k), 10.0)

    def fake_all_reduce(tensor, op='sum'):
        assert op == 'sum'
        tensor += torch.cat([torch.tensor(other.sum(axis=0), dtype=tensor.dtype),
                             torch.tensor([float(other.shape[0])], dtype=tensor.dtype)])

    monkeypatch.setattr(dino_loss_head.dist, 'all_reduce', fake_all_reduce)
    head = DINOLossHead(out_channels=k, center_momentum=0.5)
    head.update_center(torch.tensor(local, dtype=torch.float32))
    global_mean = np.concatenate([local, other]).mean(axis=0)
    np.testing.assert_allclose(head.center.numpy()[0], 0.5 * global_mean, rtol=1e-6)


def test_buffers_in_state_dict():
    head = DINOLossHead(out_channels=3, teacher_temp=0.05)
    state = head.state_dict()
    assert set(state) == {'center', 'teacher_temp'}
    assert state['teacher_temp'].item() == pytest.approx(0.05)


@pytest.mark.parametrize('student,teacher', [
    (1, 1),  # one student crop
    (2, 3),  # more teacher crops than student crops
])
def test_bad_crop_counts(student, teacher):
    head = DINOLossHead(out_channels=3)
    with pytest.raises(ValueError, match='crops'):
        head.loss([torch.zeros(2, 3)] * student, [torch.zeros(2, 3)] * teacher)


def test_bad_shapes_and_args():
    head = DINOLossHead(out_channels=3)
    with pytest.raises(ValueError, match=r'\(B, 3\)'):
        head.loss([torch.zeros(2, 4)] * 3, [torch.zeros(2, 4)] * 2)
    with pytest.raises(ValueError, match='every crop'):
        head.loss([torch.zeros(2, 3), torch.zeros(1, 3)], [torch.zeros(2, 3)])
    with pytest.raises(ValueError, match=r'student_temp must be a number in \(0, inf\)'):
        DINOLossHead(out_channels=3, student_temp=0.)
    with pytest.raises(ValueError, match='center_momentum'):
        DINOLossHead(out_channels=3, center_momentum=1.5)


def _hand_sinkhorn(scores, temp, rounds):
    """Sinkhorn-Knopp written out with explicit loops over prototypes and samples (float64)."""
    q = np.exp(scores / temp)
    m, k = q.shape
    for _ in range(rounds):
        for c in range(k):
            q[:, c] = q[:, c] / q[:, c].sum() / k
        for r in range(m):
            q[r] = q[r] / q[r].sum() / m
    return q * m


def test_sinkhorn_knopp_targets_match_hand_computation():
    rng = np.random.default_rng(1)
    batch, k, temp = 4, 6, 0.07
    student = [rng.normal(size=(batch, k)) for _ in range(3)]
    teacher = [rng.normal(size=(batch, k)) for _ in range(2)]
    head = DINOLossHead(out_channels=k, student_temp=0.1, teacher_temp=temp,
                        centering='sinkhorn_knopp', sinkhorn_iterations=3)
    loss = head.loss([torch.tensor(s, dtype=torch.float32) for s in student],
                     [torch.tensor(t, dtype=torch.float32) for t in teacher])

    targets = _hand_sinkhorn(np.concatenate(teacher), temp, 3)
    total, pairs = 0.0, 0
    for i in range(2):
        p_t = targets[i * batch:(i + 1) * batch]
        for j, s in enumerate(student):
            if i != j:
                total += -(p_t * np.log(_softmax(s / 0.1))).sum(axis=1).mean()
                pairs += 1
    assert loss.item() == pytest.approx(total / pairs, rel=1e-5)


def test_sinkhorn_knopp_balances_prototypes_where_softmax_collapses():
    # every sample prefers prototype 0: the plain softmax puts nearly all mass there, the
    # Sinkhorn-Knopp targets spread the batch evenly over the prototypes
    scores = torch.zeros(12, 4)
    scores[:, 0] = 1.0
    scores += 0.01 * torch.arange(48, dtype=torch.float32).reshape(12, 4).sin()
    head = DINOLossHead(out_channels=4, teacher_temp=0.04, centering='sinkhorn_knopp',
                        sinkhorn_iterations=50)
    q = head.sinkhorn_knopp(scores)
    torch.testing.assert_close(q.sum(dim=1), torch.ones(12))
    torch.testing.assert_close(q.sum(dim=0), torch.full((4, ), 3.0), rtol=1e-3, atol=1e-3)
    assert torch.softmax(scores / 0.04, dim=1)[:, 0].min() > 0.99


@pytest.mark.parametrize('kwargs, name', [(dict(centering='median'), 'centering'),
                                          (dict(sinkhorn_iterations=0), 'sinkhorn_iterations')])
def test_bad_centering_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DINOLossHead(out_channels=4, **kwargs)


@pytest.mark.parametrize('centering', ['mean', 'sinkhorn_knopp'])
@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_a_non_finite_teacher_score_leaves_the_centre_as_it_was(centering, bad):
    """One NaN pixel in one crop made the centre NaN for the rest of the run."""
    rng = np.random.default_rng(5)
    center0 = torch.tensor(rng.normal(size=(1, 4)), dtype=torch.float32)
    head = DINOLossHead(out_channels=4, centering=centering)
    head.center.copy_(center0)
    teacher = [torch.tensor(rng.normal(size=(2, 4)), dtype=torch.float32) for _ in range(2)]
    teacher[1][0, 2] = bad
    student = [torch.tensor(rng.normal(size=(2, 4)), dtype=torch.float32) for _ in range(3)]
    loss = head.loss(student, teacher)
    assert not torch.isfinite(loss)  # the loss says so; NonFiniteStepHook skips the step
    assert torch.equal(head.center, center0)
    teacher[1][0, 2] = 0.
    head.loss(student, teacher)  # a finite batch updates it again
    expected = 0.9 * center0.double() + 0.1 * torch.cat(teacher).double().mean(0, keepdim=True)
    torch.testing.assert_close(head.center.double(), expected, rtol=1e-6, atol=1e-7)
