"""What mmengine's Runner lacks for this project.

- :mod:`.hooks`: DINO's schedules (teacher momentum and temperature, frozen last layer,
  per-parameter gradient clipping);
- :mod:`.optimizers`: the optimizer wrapper constructors (layer-wise lr decay, trainable
  sub-modules only);
- :mod:`.safeguards`: the training safeguards our configs and tools add to mmengine's Runner.

Each sub-package is imported by the registry that holds its classes, at its first lookup
(:mod:`dinomamba_mm.registry`), so a hook lookup does not import mmpretrain.
"""
