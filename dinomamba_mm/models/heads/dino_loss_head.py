"""DINO self-distillation loss with a centred, sharpened teacher."""
from typing import List

import torch
import torch.nn.functional as F
from mmengine import dist
from mmengine.model import BaseModule

from dinomamba_mm.argument_checks import check_choice, check_int, check_number
from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class DINOLossHead(BaseModule):
    """Cross-entropy between teacher and student prototype distributions over crop pairs.

    For teacher (global) crop ``i`` and student crop ``j`` with ``i != j``::

        p_t = softmax((t_i - center) / teacher_temp)
        loss_ij = mean over the batch of  sum_k -p_t[k] * log_softmax(s_j / student_temp)[k]

    and the loss is the mean of ``loss_ij`` over all such pairs. Student crop ``j`` and
    teacher crop ``j`` are the same view for ``j < num_teacher_crops`` (the global crops come
    first in both lists), which is what ``i != j`` excludes.

    After the loss, the centre follows an EMA of the batch mean of the teacher scores (all
    teacher crops, all processes)::

        center <- center_momentum * center + (1 - center_momentum) * mean(t)

    unless that mean holds a NaN or an infinity (a NaN pixel in one crop, a diverging teacher,
    on any process): the centre then keeps its value, so it never becomes non-finite. The
    step itself is skipped by :class:`NonFiniteStepHook`.

    ``center`` and ``teacher_temp`` are buffers, so they live in checkpoints and a resumed run
    continues exactly. ``teacher_temp`` is set by :class:`DINOTeacherTempHook` when the
    warm-up schedule is used.

    ``centering='sinkhorn_knopp'`` replaces the centred softmax of the teacher by the
    Sinkhorn-Knopp normalisation of DINOv2 (Oquab et al., 2023): the matrix
    ``exp(t / teacher_temp)`` of all teacher crops of the batch (all processes) is rescaled
    alternately so that every prototype receives the same total mass and every sample's row
    sums to one, ``sinkhorn_iterations`` times. The targets then spread the batch evenly over
    the prototypes, which rules out both collapses (one prototype for everything, or uniform
    targets) without a running centre; small batches and short runs, where the EMA centre
    lags and the mean-centred loss oscillates between the two collapses, need it. The centre
    is still tracked (for logging and checkpoints) but not used.

    Args:
        out_channels (int): Number of prototypes K (size of the centre).
        student_temp (float): Student temperature. Defaults to 0.1.
        teacher_temp (float): Initial teacher temperature. Defaults to 0.04.
        center_momentum (float): EMA momentum of the centre. Defaults to 0.9.
        centering (str): ``'mean'`` (DINO, the paper's) or ``'sinkhorn_knopp'`` (DINOv2).
            Defaults to ``'mean'``.
        sinkhorn_iterations (int): Normalisation rounds of ``'sinkhorn_knopp'``.
            Defaults to 3.
    """

    CENTERINGS = ('mean', 'sinkhorn_knopp')

    def __init__(self,
                 out_channels: int,
                 student_temp: float = 0.1,
                 teacher_temp: float = 0.04,
                 center_momentum: float = 0.9,
                 centering: str = 'mean',
                 sinkhorn_iterations: int = 3,
                 init_cfg=None) -> None:
        super().__init__(init_cfg=init_cfg)
        check_int('out_channels', out_channels, 1)
        check_number('student_temp', student_temp, 0, exclusive_minimum=True)
        check_number('teacher_temp', teacher_temp, 0, exclusive_minimum=True)
        check_number('center_momentum', center_momentum, 0, 1)
        check_choice('centering', centering, self.CENTERINGS)
        check_int('sinkhorn_iterations', sinkhorn_iterations, 1)
        self.centering = centering
        self.sinkhorn_iterations = sinkhorn_iterations
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.register_buffer('center', torch.zeros(1, out_channels))
        self.register_buffer('teacher_temp', torch.tensor(float(teacher_temp)))

    def loss(self, student_scores: List[torch.Tensor],
             teacher_scores: List[torch.Tensor]) -> torch.Tensor:
        """Compute the loss, then update the centre.

        Args:
            student_scores (list[Tensor]): per crop, (B, K) scores of the student; the
                teacher's crops first, in the same order.
            teacher_scores (list[Tensor]): per teacher crop, (B, K) scores of the teacher
                (no gradient flows into them).

        Returns:
            Tensor: scalar loss.
        """
        num_teacher, num_student = len(teacher_scores), len(student_scores)
        if num_teacher < 1 or num_student < 2 or num_teacher > num_student:
            raise ValueError('need 1 <= teacher crops <= student crops and >= 2 student crops, '
                             f'got {num_teacher} teacher and {num_student} student crops')
        shape = tuple(teacher_scores[0].shape)
        if len(shape) != 2 or shape[1] != self.center.shape[1]:
            raise ValueError(f'scores must have shape (B, {self.center.shape[1]}), got {shape}')
        for scores in [*student_scores, *teacher_scores]:
            if tuple(scores.shape) != shape:
                raise ValueError(f'every crop must have scores of shape {shape}, '
                                 f'got {tuple(scores.shape)}')

        if self.centering == 'mean':
            teacher_probs = [
                F.softmax((t.detach().float() - self.center) / self.teacher_temp, dim=-1)
                for t in teacher_scores
            ]
        else:
            teacher_probs = list(
                self.sinkhorn_knopp(torch.cat(teacher_scores).detach().float()).chunk(
                    num_teacher))
        student_log_probs = [
            F.log_softmax(s.float() / self.student_temp, dim=-1) for s in student_scores
        ]
        total = student_log_probs[0].new_zeros(())
        num_pairs = 0
        for i, p_t in enumerate(teacher_probs):
            for j, log_p_s in enumerate(student_log_probs):
                if i == j:
                    continue
                total = total + torch.sum(-p_t * log_p_s, dim=-1).mean()
                num_pairs += 1
        self.update_center(torch.cat(teacher_scores).detach())
        return total / num_pairs

    @torch.no_grad()
    def sinkhorn_knopp(self, teacher_scores: torch.Tensor) -> torch.Tensor:
        """Balanced teacher targets of DINOv2 for this process's rows.

        Args:
            teacher_scores (Tensor): (M, K) scores of every teacher crop of the local batch.

        Returns:
            Tensor: (M, K) targets, rows summing to one; over the global batch (all processes)
            the total mass of each prototype approaches M_global / K as the rounds grow.
        """
        num_prototypes = teacher_scores.shape[1]
        # subtracting the global max keeps exp finite; it cancels in every normalisation
        shift = teacher_scores.max().reshape(1)
        dist.all_reduce(shift, op='max')
        q = torch.exp((teacher_scores - shift) / self.teacher_temp)
        num_rows = teacher_scores.new_tensor([teacher_scores.shape[0]])
        dist.all_reduce(num_rows, op='sum')
        for _ in range(self.sinkhorn_iterations):
            column_mass = q.sum(dim=0)
            dist.all_reduce(column_mass, op='sum')
            q = q / (column_mass * num_prototypes)
            q = q / q.sum(dim=1, keepdim=True) / num_rows
        return q * num_rows

    @torch.no_grad()
    def update_center(self, teacher_scores: torch.Tensor) -> None:
        """EMA of the centre with the mean of ``teacher_scores`` (N, K) over all processes;
        a non-finite mean leaves the centre unchanged (decided alike on every process, after
        the all-reduce)."""
        stats = torch.cat([teacher_scores.float().sum(dim=0),
                           teacher_scores.new_tensor([teacher_scores.shape[0]], dtype=torch.float)])
        dist.all_reduce(stats, op='sum')
        batch_center = (stats[:-1] / stats[-1]).unsqueeze(0)
        updated = self.center * self.center_momentum + batch_center * (1.0 - self.center_momentum)
        # torch.where, not an if: no host sync per step
        self.center.copy_(torch.where(torch.isfinite(batch_center).all(), updated, self.center))
