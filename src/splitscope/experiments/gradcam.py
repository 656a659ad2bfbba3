"""Grad-CAM on torch hooks (Selvaraju et al., ICCV 2017) and a simple body-mask rule.

For a target layer with activations ``A`` (channels k, h × w) and the logit ``y_c`` of the
class explained, the channel weights are the spatial means of the gradient,
``α_k = (1 / hw) Σ_ij ∂y_c / ∂A_k,ij``, and the map is ``ReLU(Σ_k α_k A_k)``, upsampled
bilinearly to the input size. Maps are not rescaled: the attribution layer uses the share of
absolute mass outside a mask, which does not depend on scale.
"""

from __future__ import annotations

import numpy as np

from splitscope.experiments.backbones import require_torch

OTSU_RULE = {"rule": "Otsu threshold on the S×S grey image (skimage.filters.threshold_otsu); "
                     "foreground = pixels above it; largest 8-connected component; holes "
                     "filled (scipy.ndimage)", "connectivity": 8, "fill_holes": True}


def grad_cam(model, target_layer, x, classes=None) -> np.ndarray:
    """Grad-CAM maps ``(n, H, W)`` float32 for inputs ``x`` ``(n, c, H, W)``.

    Parameters
    ----------
    model : torch.nn.Module
        Returns logits ``(n, n_classes)``.
    target_layer : torch.nn.Module
        The module whose output ``A`` is explained (usually the last convolutional block).
    classes : array-like of int, optional
        Class explained per input (default: the predicted class, first maximum).
    """
    torch = require_torch()
    saved = {}

    def forward_hook(_module, _inputs, output):
        output.retain_grad()
        saved["a"] = output

    handle = target_layer.register_forward_hook(forward_hook)
    try:
        model.eval()
        x = x.detach().clone().requires_grad_(True)
        logits = model(x)
        if classes is None:
            classes = logits.argmax(dim=1)
        classes = torch.as_tensor(classes, dtype=torch.long)
        model.zero_grad(set_to_none=True)
        logits.gather(1, classes[:, None]).sum().backward()
        a, g = saved["a"], saved["a"].grad
        alpha = g.mean(dim=(2, 3), keepdim=True)
        cam = torch.relu((alpha * a).sum(dim=1, keepdim=True))
        cam = torch.nn.functional.interpolate(cam, size=x.shape[-2:], mode="bilinear",
                                              align_corners=False)
    finally:
        handle.remove()
    return cam[:, 0].detach().cpu().numpy().astype(np.float32)


def body_mask(image: np.ndarray) -> np.ndarray:
    """The body mask of one grey uint8 image by :data:`OTSU_RULE` (uint8, 1 inside)."""
    from scipy import ndimage
    from skimage.filters import threshold_otsu

    if image.min() == image.max():
        return np.ones(image.shape, np.uint8)
    fg = image > threshold_otsu(image)
    lab, n = ndimage.label(fg, structure=np.ones((3, 3)))
    if n == 0:
        return np.ones(image.shape, np.uint8)
    sizes = np.bincount(lab.ravel())[1:]
    keep = lab == (int(np.argmax(sizes)) + 1)
    return ndimage.binary_fill_holes(keep).astype(np.uint8)
