"""The per-iteration cosine schedule DINO uses for teacher momentum and weight decay."""
import math


def cosine_schedule(start: float, end: float, step: int, total_steps: int) -> float:
    """``end + (start - end) * (1 + cos(pi * step / total_steps)) / 2``.

    Equals ``start`` at ``step == 0`` and ``end`` at ``step == total_steps`` (DINO's
    ``cosine_scheduler`` without warm-up, where the last trained step is ``total_steps - 1``).
    """
    if total_steps < 1:
        raise ValueError(f'total_steps must be >= 1, got {total_steps}')
    if not 0 <= step <= total_steps:
        raise ValueError(f'step must be in [0, {total_steps}], got {step}')
    return end + (start - end) * (1.0 + math.cos(math.pi * step / total_steps)) / 2.0
