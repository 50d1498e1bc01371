import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit

TEXT = 'type: "Yolo" yolo_param { classes: 2 num: 6 mask: 3 mask: 4 mask: 5 %s ' \
       'anchors: [10, 14, 23, 27, 37, 58, 81, 82, 135, 169, 344, 319] }'


def expected(x, classes, anchors, scale_x_y=1.0):
    """Darknet's forward_yolo_layer at inference, entry by entry."""
    n, c, h, w = x.shape
    y = x.copy().reshape(n, anchors, 5 + classes, h, w)
    y[:, :, 0:2] = expit(y[:, :, 0:2]) * scale_x_y - 0.5 * (scale_x_y - 1)
    y[:, :, 4:] = expit(y[:, :, 4:])
    return y.reshape(x.shape)


@pytest.mark.parametrize("scale_x_y", [1.0, 1.2])
def test_yolo_forward_gradient_and_in_place(scale_x_y):
    extra = "scale_x_y: %g" % scale_x_y if scale_x_y != 1 else ""
    x = np.random.default_rng(0).uniform(-4, 4, (2, 21, 3, 4))
    layer, bottom, top = check_layer(TEXT % extra, [x], in_place=True)
    scale = float(np.float32(scale_x_y))  # a float field
    np.testing.assert_allclose(top[0].data, expected(x, 2, 3, scale), rtol=1e-12, atol=1e-15)
    assert layer.mask == [3, 4, 5] and layer.anchors[5] == (344, 319)
    # tw, th pass through unchanged
    np.testing.assert_array_equal(top[0].data.reshape(2, 3, 7, 3, 4)[:, :, 2:4],
                                  x.reshape(2, 3, 7, 3, 4)[:, :, 2:4])


def test_yolo_new_coords_forward_gradient_and_in_place():
    """AlexeyAB's new_coords=1: forward_yolo_layer applies no logistic (the convolution before
    did), only x, y = scale_x_y * t - (scale_x_y - 1) / 2; the rest passes unchanged."""
    x = np.random.default_rng(1).uniform(-1, 2, (2, 21, 3, 4))
    layer, bottom, top = check_layer(TEXT % "scale_x_y: 2 new_coords: true", [x],
                                     in_place=True)
    assert layer.new_coords
    y = x.copy().reshape(2, 3, 7, 3, 4)
    y[:, :, 0:2] = 2 * y[:, :, 0:2] - 0.5
    np.testing.assert_allclose(top[0].data, y.reshape(x.shape), rtol=1e-12, atol=1e-15)


def test_yolo_mask_defaults_to_all_anchors():
    layer = make_layer('type: "Yolo" yolo_param { classes: 1 num: 2 }')
    bottom, top = random_blobs([(1, 12, 2, 2)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert layer.mask == [0, 1]
    np.testing.assert_allclose(top[0].data, expected(bottom[0].data, 1, 2), rtol=1e-12)


def test_yolo_float32_large_inputs():
    x = np.array([-500, -2, 0, 2, 500, 1, 3], np.float32).reshape(1, 7, 1, 1)
    layer = make_layer('type: "Yolo" yolo_param { classes: 2 }', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    with np.errstate(over="raise", invalid="raise"):
        layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, expected(x.astype(np.float64), 2, 1), rtol=1e-6,
                               atol=1e-30)


@pytest.mark.parametrize("text,shape,pattern", [
    ('yolo_param { classes: 2 num: 3 mask: 0 }', (1, 8, 2, 2),
     r"input has 8 channels; expected 7 = 1 anchors x \(5 \+ 2 classes\)"),
    ('yolo_param { classes: 2 num: 3 mask: 3 }', (1, 7, 2, 2),
     r"yolo_param mask \[3\] refers to anchor\(s\) \[3\], but num is 3"),
    ('yolo_param { classes: 2 num: 2 anchors: [1, 2, 3] }', (1, 14, 2, 2),
     r"yolo_param anchors lists 3 anchor values; expected 4"),
    ('yolo_param { classes: 2 }', (1, 7, 2), r"input must have 4 axes"),
])
def test_yolo_errors(text, shape, pattern):
    layer = make_layer('name: "head" type: "Yolo" ' + text)
    bottom, top = random_blobs([shape]), empty_blobs(1)
    with pytest.raises(LayerError, match=r"layer 'head' \(type Yolo\): " + pattern):
        layer.SetUp(bottom, top)


def test_yolo_backward_needs_forward():
    layer = make_layer('type: "Yolo" yolo_param { classes: 2 }')
    bottom, top = random_blobs([(1, 7, 2, 2)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match="backward needs a forward pass"):
        layer.Backward(top, [True], bottom)
