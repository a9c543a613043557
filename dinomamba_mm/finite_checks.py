"""Where NaN / infinity hide in a list of tensors: shared by the training hooks and the models."""
from typing import List

import torch


def non_finite_tensors(tensors: List[torch.Tensor]) -> List[int]:
    """Indices of the tensors holding a NaN or an infinity.

    One fused pass (``torch._foreach_norm`` with the max-abs norm, which never overflows for
    finite values) and one host sync, whatever the number of tensors.
    """
    present = [i for i, tensor in enumerate(tensors) if tensor.numel()]  # max of nothing: error
    if not present:
        return []
    peaks = torch._foreach_norm([tensors[i] for i in present], float('inf'))
    bad = torch.nonzero(~torch.isfinite(torch.stack([p.float() for p in peaks])))
    return [present[j] for j in bad.flatten().tolist()]
