"""A few INFO lines on an optimizer's parameter groups, instead of mmengine's line per parameter.

mmengine's ``DefaultOptimWrapperConstructor`` logs an INFO line for every parameter with a
setting of its own (``paramwise_options -- NAME:weight_decay=0.0``: 269 lines for DINO's
``bias_decay_mult`` / ``flat_decay_mult`` on DinoVim-T) and a warning for every frozen one (DINO's
EMA teacher: one per student parameter). Our constructors (:class:`ParamGroupSummaryMixin`) drop
those lines while their base class builds the groups and log :func:`param_group_summary`
afterwards; the groups themselves are the base class's.
"""
import contextlib
import logging
from collections import defaultdict
from typing import Dict, Iterator, List, Tuple

from mmengine.logging import MMLogger, print_log
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapper
from torch import nn
from torch.optim import Optimizer

#: the per-parameter lines of mmengine's DefaultOptimWrapperConstructor.add_params (0.10.7)
PER_PARAMETER_PREFIX = 'paramwise_options -- '
FROZEN_SUFFIX = ' is skipped since its requires_grad=False'
#: param-group keys that name one parameter (mmpretrain's layer decay), not a setting
NAME_KEYS = ('param_name', )


class _PerParameterLines(logging.Filter):

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith(PER_PARAMETER_PREFIX) or message.endswith(FROZEN_SUFFIX))


@contextlib.contextmanager
def per_parameter_lines_dropped() -> Iterator[None]:
    """Drop mmengine's per-parameter INFO lines and frozen-parameter warnings from the current
    MMLogger while the block runs (every other message passes)."""
    logger = MMLogger.get_current_instance()
    line_filter = _PerParameterLines()
    logger.addFilter(line_filter)
    try:
        yield
    finally:
        logger.removeFilter(line_filter)


def _count(values: int) -> str:
    return f'{values / 1e6:.1f} M' if values >= 100_000 else f'{values:,}'


def _frozen_summary(named: List[Tuple[str, nn.Parameter]]) -> List[str]:
    """``'teacher.* (356 tensors)'`` for a top-level module frozen whole, else the names (the
    first three of a module, and how many more)."""
    frozen_by_top: Dict[str, List[str]] = defaultdict(list)
    size_by_top: Dict[str, int] = defaultdict(int)
    for name, param in named:
        size_by_top[name.split('.')[0]] += 1
        if not param.requires_grad:
            frozen_by_top[name.split('.')[0]].append(name)
    parts = []
    for top, names in frozen_by_top.items():
        if len(names) == size_by_top[top] and len(names) > 1:
            parts.append(f'{top}.* ({len(names)} tensors)')
        elif len(names) > 3:
            parts.append(f'{", ".join(names[:3])} and {len(names) - 3} more of {top}.*')
        else:
            parts += names
    return parts


def param_group_summary(model: nn.Module, optimizer: Optimizer) -> List[str]:
    """Lines describing ``optimizer``'s parameter groups over ``model``'s parameters.

    One line per setting other than the weight decay (the lr, and keys such as mmpretrain's
    ``layer_id`` / ``lr_scale``), with its tensors and values split by weight decay, an example
    name for each decay other than the optimizer's; then the parameters left out because they
    do not require a gradient.

    Args:
        model (nn.Module): the model the groups were built from (a wrapper's ``module``).
        optimizer (Optimizer): the optimizer holding the groups.

    Returns:
        list[str]: the lines, the first a headline.
    """
    names = {id(param): name for name, param in model.named_parameters()}
    defaults = optimizer.defaults
    # setting -> weight decay -> names and sizes of its tensors
    rows: Dict[tuple, Dict[float, List[Tuple[str, int]]]] = defaultdict(lambda: defaultdict(list))
    for group in optimizer.param_groups:
        setting = tuple((key, group[key]) for key in sorted(group)
                        if key not in ('params', 'weight_decay', *NAME_KEYS)
                        and (key == 'lr' or key not in defaults or group[key] != defaults[key]))
        for param in group['params']:
            rows[setting][group.get('weight_decay')].append((names.get(id(param), '?'),
                                                             param.numel()))
    tensors = sum(len(items) for row in rows.values() for items in row.values())
    values = sum(size for row in rows.values() for items in row.values() for _, size in items)
    lines = [f'{type(optimizer).__name__}: {tensors} parameter tensors ({_count(values)} '
             f'values) in {len(optimizer.param_groups)} groups, by setting:']
    for setting, by_decay in rows.items():
        decays = []
        for decay, items in by_decay.items():
            example = '' if decay == defaults.get('weight_decay') else f', e.g. {items[0][0]}'
            size = _count(sum(numel for _, numel in items))
            decays.append(f'{decay:g} on {len(items)} tensors ({size} values{example})')
        described = ', '.join(f'{key} {value:g}' if isinstance(value, float) else
                              f'{key} {value}' for key, value in setting)
        lines.append(f'  {described}: weight_decay {"; ".join(decays)}')
    frozen = _frozen_summary(list(model.named_parameters()))
    if frozen:
        lines.append(f'  not trained (requires_grad=False): {", ".join(frozen)}')
    return lines


class ParamGroupSummaryMixin:
    """For an mmengine optimizer wrapper constructor: its groups logged as a few INFO lines
    (:func:`param_group_summary`), its per-parameter lines dropped. Put it first among the
    bases: ``class C(ParamGroupSummaryMixin, DefaultOptimWrapperConstructor)``."""

    def __call__(self, model: nn.Module) -> OptimWrapper:
        with per_parameter_lines_dropped():
            optim_wrapper = super().__call__(model)
        lines = param_group_summary(model.module if is_model_wrapper(model) else model,
                                    optim_wrapper.optimizer)
        print_log(f'{type(self).__name__}: ' + '\n'.join(lines), logger='current')
        return optim_wrapper
