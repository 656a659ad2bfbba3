"""Grad-CAM against a case computed by hand, and the Otsu body-mask rule."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from splitscope.experiments.gradcam import body_mask, grad_cam


def test_grad_cam_matches_the_hand_computed_case():
    # identity "layer" A = x (2 channels, 2x2); logit_c = sum_k w_ck * mean_ij A_k,ij
    # => dy_c/dA_k,ij = w_ck / 4, alpha_k = w_ck / 4, cam = relu(sum_k w_ck A_k / 4)
    a = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 0.0], [0.0, -8.0]]]])
    w = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    layer = torch.nn.Identity()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x).mean(dim=(2, 3)) @ w.T

    cam0 = grad_cam(Model(), layer, a, classes=[0])
    # class 0: (1*A0 + 2*A1) / 4 = [[9, 2], [3, -12]] / 4 -> relu
    np.testing.assert_allclose(cam0[0], np.array([[2.25, 0.5], [0.75, 0.0]]), atol=1e-6)
    cam1 = grad_cam(Model(), layer, a, classes=[1])
    # class 1: (-A0 + 0.5*A1) / 4 = [[1, -2], [-3, -8]] / 4 -> relu
    np.testing.assert_allclose(cam1[0], np.array([[0.25, 0.0], [0.0, 0.0]]), atol=1e-6)


def test_grad_cam_upsamples_to_the_input_and_defaults_to_the_predicted_class():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 3, 3, stride=2, padding=1)
    model = torch.nn.Sequential(conv, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(3, 2))
    x = torch.randn(4, 1, 16, 16)
    cams = grad_cam(model, conv, x)
    assert cams.shape == (4, 16, 16) and (cams >= 0).all()
    pred = model(x).argmax(1).numpy()
    np.testing.assert_array_equal(cams, grad_cam(model, conv, x, classes=pred))


def test_body_mask_keeps_the_largest_component_with_holes_filled():
    img = np.full((20, 20), 10, np.uint8)
    img[2:14, 2:14] = 200  # the body, with a dark hole
    img[6:8, 6:8] = 10
    img[17:19, 17:19] = 200  # a small bright label outside it
    mask = body_mask(img)
    assert mask[6, 6] == 1 and mask[2, 2] == 1 and mask[18, 18] == 0
    assert int(mask.sum()) == 12 * 12
    assert body_mask(np.zeros((5, 5), np.uint8)).all()  # a flat image: everything inside
