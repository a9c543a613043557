"""DINO: self-distillation of a student network from its EMA teacher over multi-crop views."""
import copy
from typing import List, Optional, Sequence, Union

import torch
from mmpretrain.models.selfsup import BaseSelfSupervisor
from mmpretrain.structures import DataSample
from torch import nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

from dinomamba_mm.argument_checks import check_choice, check_int, check_number
from dinomamba_mm.checkpoints import load_checkpoint_into
from dinomamba_mm.finite_checks import non_finite_tensors
from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class DINO(BaseSelfSupervisor):
    """DINO self-supervised algorithm (Caron et al., 2021).

    Student = ``backbone`` + ``neck`` (a :class:`DINOProjectionHead`); ``head`` is the loss
    (:class:`DINOLossHead`, holding the centre and the teacher temperature). The teacher is a
    copy of the student, ``teacher = ModuleDict(backbone=..., neck=...)``, that is never
    trained by gradients (``requires_grad=False``: mmengine's optimizer constructor leaves it
    out when ``paramwise_cfg`` is set, as in our configs; without one it is handed to the
    optimizer but never gets a gradient, so it is never stepped) and is updated only by
    :meth:`update_teacher`: ``teacher <- m * teacher + (1 - m) * student`` for parameters,
    buffers copied. :class:`DINOTeacherEMAHook` calls it after every optimizer step with the
    cosine momentum schedule.

    ``teacher_mode`` chooses the teacher's mode during training. ``'eval'`` (the default, as in
    DINO, whose teacher is built without drop path): the teacher is deterministic.
    ``'train'``: the teacher follows the model's mode, so its drop path (the student's rate, as
    it is the student's copy) is active in training, as in the paper's ``main_dino_vim.py``,
    which builds the teacher with drop path 0.1 and never calls ``eval()`` on it
    (docs/paper.md). In both modes ``model.eval()`` puts the teacher in eval mode.

    Checkpoint keys (``state_dict``): student ``backbone.*`` / ``neck.*``; teacher
    ``teacher.backbone.*`` / ``teacher.neck.*`` (the teacher backbone is the model to evaluate
    and export, e.g. ``init_cfg=dict(type='Pretrained', checkpoint=...,
    prefix='teacher.backbone.')``);
    buffers ``head.center`` (1, K), ``head.teacher_temp`` () and ``momentum`` () (the last
    teacher momentum used).

    Training input: a list of crops, each (B, 3, H_c, W_c), the ``num_teacher_crops`` global
    crops first (the order :class:`DINOMultiCrop` produces). The teacher sees the global crops,
    the student all crops; consecutive crops of one resolution go through the backbone as one
    batch. ``extract_feat`` (and ``mode='tensor'``) runs the teacher backbone.

    The backbone must return a (B, C) feature or a tuple whose last item is one (mmpretrain's
    ``out_type='cls_token'``; DinoVim's class/register token output).

    The sub-modules are built by mmpretrain's registry: name ours ``'dinomamba_mm.X'``.

    Args:
        backbone (dict): Student backbone config.
        neck (dict): Projection head config (:class:`DINOProjectionHead`).
        head (dict): Loss head config (:class:`DINOLossHead`).
        num_teacher_crops (int): How many leading crops are global (teacher) crops.
            Defaults to 2.
        teacher_mode (str): ``'eval'`` or ``'train'``, the teacher's mode while the model
            trains (see above). Defaults to ``'eval'``.
        pretrained (str, optional): A checkpoint read as
            ``init_cfg=dict(type='Pretrained', checkpoint=pretrained)``, as in
            ``BaseSelfSupervisor``. Defaults to None.
        data_preprocessor (dict | nn.Module, optional): The data preprocessor or its config;
            a config without ``type`` (None included) builds mmpretrain's
            ``SelfSupDataPreprocessor``, which handles crops of different sizes.
            Defaults to None.
        init_cfg (dict, optional): mmengine init config. Defaults to None.
    """

    TEACHER_MODES = ('eval', 'train')

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 num_teacher_crops: int = 2,
                 teacher_mode: str = 'eval',
                 pretrained: Optional[str] = None,
                 data_preprocessor: Optional[Union[dict, nn.Module]] = None,
                 init_cfg: Optional[dict] = None) -> None:
        if neck is None or head is None:
            raise ValueError('DINO needs a projection head (neck) and a loss head (head), '
                             f'got neck={neck!r}, head={head!r}')
        check_int('num_teacher_crops', num_teacher_crops, 1)
        check_choice('teacher_mode', teacher_mode, self.TEACHER_MODES)
        super().__init__(backbone=backbone, neck=neck, head=head, pretrained=pretrained,
                         data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.num_teacher_crops = num_teacher_crops
        self.teacher_mode = teacher_mode
        self.teacher = nn.ModuleDict(
            dict(backbone=copy.deepcopy(self.backbone), neck=copy.deepcopy(self.neck)))
        self.teacher.requires_grad_(False)
        self.train(self.training)
        self.register_buffer('momentum', torch.tensor(1.0))

    def init_weights(self) -> None:
        """Initialise the student, then start the teacher as an exact copy of it.

        With ``pretrained`` (a whole-model ``Pretrained`` init_cfg without ``prefix``) the
        whole model, teacher included, is loaded from the checkpoint strictly: mmengine's
        ``Pretrained`` would only log missing keys, and a checkpoint without ``teacher.*`` keys
        would leave the teacher at its construction-time weights.

        Raises:
            ValueError: naming the checkpoint, when its keys or shapes differ from the model's.
        """
        init_cfg = self.init_cfg
        if (isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained'
                and init_cfg.get('prefix') is None):
            load_checkpoint_into(self, init_cfg['checkpoint'], prefix='', strict=True)
            self._is_init = True
            return
        super().init_weights()
        self.teacher['backbone'].load_state_dict(self.backbone.state_dict())
        self.teacher['neck'].load_state_dict(self.neck.state_dict())

    def train(self, mode: bool = True) -> 'DINO':
        """Set the student's mode; the teacher's follows ``teacher_mode``."""
        super().train(mode)
        self.teacher.train(mode and self.teacher_mode == 'train')
        return self

    @torch.no_grad()
    def update_teacher(self, momentum: float) -> None:
        """EMA step ``teacher <- momentum * teacher + (1 - momentum) * student``.

        Parameters are averaged, buffers are copied from the student. ``momentum`` is stored
        in the ``momentum`` buffer.

        Raises:
            FloatingPointError: naming the student tensors, when a student parameter or
                floating-point buffer holds a NaN or an infinity; the teacher is left
                unchanged, so it never becomes non-finite.
        """
        check_number('momentum', momentum, 0, 1)
        self._check_student_finite()
        self.momentum.fill_(momentum)
        ema = get_ema_multi_avg_fn(momentum)  # torch's EMA of parameter lists
        for name in ('backbone', 'neck'):
            student, teacher = getattr(self, name), self.teacher[name]
            ema(list(teacher.parameters()), [p.detach() for p in student.parameters()], None)
            for t_buf, s_buf in zip(teacher.buffers(), student.buffers()):
                t_buf.copy_(s_buf)

    def _check_student_finite(self) -> None:
        named = [(f'{name}.{key}', tensor.detach())
                 for name in ('backbone', 'neck')
                 for key, tensor in getattr(self, name).state_dict(keep_vars=True).items()
                 if tensor.is_floating_point()]
        bad = non_finite_tensors([tensor for _, tensor in named])
        if bad:
            names = [named[i][0] for i in bad]
            raise FloatingPointError(
                f'{len(bad)} of {len(named)} student tensors hold NaN or inf '
                f'({", ".join(names[:5])}{", ..." if len(names) > 5 else ""}); the teacher '
                'was not updated. Add dinomamba_mm.NonFiniteStepHook to custom_hooks to skip '
                'non-finite steps before they reach the weights')

    def extract_feat(self, inputs: torch.Tensor):
        """Teacher backbone features of (B, 3, H, W) images (the model to evaluate/export)."""
        return self.teacher['backbone'](inputs)

    def loss(self, inputs: List[torch.Tensor],
             data_samples: Optional[List[DataSample]] = None) -> dict:
        """DINO loss of a multi-crop batch.

        Args:
            inputs (List[torch.Tensor]): Crops, each of shape (B, 3, H_c, W_c), global crops
                first.
            data_samples (List[DataSample], optional): Unused. Defaults to None.

        Returns:
            dict: ``loss`` plus ``teacher_temp`` and ``teacher_momentum`` for logging.
        """
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f'inputs must be a list of crops, got {type(inputs).__name__}')
        if len(inputs) < max(self.num_teacher_crops, 2):
            raise ValueError(f'inputs must hold at least num_teacher_crops='
                             f'{self.num_teacher_crops} crops and at least 2 (the loss pairs '
                             f'different crops), got {len(inputs)}')
        with torch.no_grad():
            teacher_scores = self._project(self.teacher['backbone'], self.teacher['neck'],
                                           inputs[:self.num_teacher_crops])
        student_scores = self._project(self.backbone, self.neck, inputs)
        loss = self.head.loss(student_scores, teacher_scores)
        return dict(loss=loss,
                    teacher_temp=self.head.teacher_temp.detach().clone(),
                    teacher_momentum=self.momentum.detach().clone())

    @staticmethod
    def _project(backbone: nn.Module, neck: nn.Module,
                 crops: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Per-crop (B, K) scores; runs of same-size crops share one backbone call."""
        batch_size = crops[0].shape[0]
        for crop in crops:
            if crop.dim() != 4 or crop.shape[0] != batch_size:
                raise ValueError('every crop must be (B, C, H, W) with one B, got shapes '
                                 f'{[tuple(c.shape) for c in crops]}')
        features = []
        start = 0
        while start < len(crops):
            end = start + 1
            while end < len(crops) and crops[end].shape[-2:] == crops[start].shape[-2:]:
                end += 1
            out = backbone(torch.cat(list(crops[start:end])))
            if isinstance(out, (tuple, list)):
                out = out[-1]
            if out.dim() != 2:
                raise ValueError('the backbone must return (B, C) features (or a tuple ending '
                                 f'with them), got shape {tuple(out.shape)}')
            features.append(out)
            start = end
        return list(neck(torch.cat(features)).chunk(len(crops)))
