"""mmpretrain's ColorJitter with a hue adjustment that works on numpy 2."""
from typing import Dict

import mmcv
from mmpretrain.datasets.transforms import ColorJitter

from dinomamba_mm.compat import adjust_hue
from dinomamba_mm.registry import TRANSFORMS


@TRANSFORMS.register_module()
class HueSafeColorJitter(ColorJitter):
    """mmpretrain's ``ColorJitter`` (same arguments, same draws from ``np.random``) whose hue
    step is :func:`dinomamba_mm.compat.adjust_hue`: mmcv <= 2.2.0's ``adjust_hue`` fails for
    every negative hue factor on numpy >= 2, i.e. for half the draws of ``hue > 0``.

    The four adjustments run in the random order mmpretrain draws (``_rand_params``, its
    ``cache_randomness`` draw of mmpretrain 1.2.0), each with mmcv's function but the hue.
    """

    def transform(self, results: Dict) -> Dict:
        img = results['img']
        order, brightness, contrast, saturation, hue = self._rand_params()
        for index in order:
            if index == 0 and brightness is not None:
                img = mmcv.adjust_brightness(img, brightness, backend=self.backend)
            elif index == 1 and contrast is not None:
                img = mmcv.adjust_contrast(img, contrast, backend=self.backend)
            elif index == 2 and saturation is not None:
                img = mmcv.adjust_color(img, alpha=saturation, backend=self.backend)
            elif index == 3 and hue is not None:
                img = adjust_hue(img, hue, backend=self.backend)
        results['img'] = img
        return results
