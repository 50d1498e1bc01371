import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit
softmax = _special.softmax


def expected(x, num, coords, classes, use_softmax, background):
    """Darknet's forward_region_layer at inference, entry by entry."""
    n, c, h, w = x.shape
    raw = x.reshape(n, num, coords + 1 + classes, h, w)
    y = raw.copy()
    y[:, :, 0:2] = expit(raw[:, :, 0:2])
    if not background:
        y[:, :, coords] = expit(raw[:, :, coords])
    if use_softmax:
        start = coords if background else coords + 1
        y[:, :, start:] = softmax(raw[:, :, start:], axis=2)
    else:
        y[:, :, coords + 1:] = expit(raw[:, :, coords + 1:])
    return y.reshape(x.shape)


@pytest.mark.parametrize("coords,use_softmax,background", [
    (4, True, False), (4, False, False), (4, True, True), (6, True, False)])
def test_region_forward_gradient_and_in_place(coords, use_softmax, background):
    classes, num = 3, 2
    text = ('type: "Region" region_param { classes: %d coords: %d num: %d softmax: %s '
            'background: %s anchors: [1.08, 1.19, 3.42, 4.41] }'
            % (classes, coords, num, str(use_softmax).lower(), str(background).lower()))
    x = np.random.default_rng(coords).uniform(-3, 3, (2, num * (coords + 1 + classes), 3, 2))
    layer, bottom, top = check_layer(text, [x], in_place=True)
    np.testing.assert_allclose(top[0].data, expected(x, num, coords, classes, use_softmax,
                                                     background), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(layer.anchors, [(1.08, 1.19), (3.42, 4.41)], rtol=1e-7)


def test_region_softmax_sums_to_one_per_anchor_and_cell():
    layer = make_layer('type: "Region" region_param { classes: 4 num: 3 softmax: true }')
    bottom, top = random_blobs([(1, 27, 2, 3)], low=-20, high=20), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    probs = top[0].data.reshape(1, 3, 9, 2, 3)[:, :, 5:]
    np.testing.assert_allclose(probs.sum(axis=2), 1, rtol=1e-12)


@pytest.mark.parametrize("text,shape,pattern", [
    ('region_param { classes: 2 num: 2 }', (1, 13, 2, 2),
     r"input has 13 channels; expected 14 = 2 anchors x \(4 coords \+ 1 \+ 2 classes\)"),
    ('region_param { classes: 2 coords: 1 }', (1, 4, 2, 2),
     r"region_param coords must be at least 2"),
    ('region_param { classes: 2 num: 0 }', (1, 7, 2, 2),
     r"region_param num \(anchors per cell\) must be"),
])
def test_region_errors(text, shape, pattern):
    layer = make_layer('name: "head" type: "Region" ' + text)
    bottom, top = random_blobs([shape]), empty_blobs(1)
    with pytest.raises(LayerError, match=r"layer 'head' \(type Region\): " + pattern):
        layer.SetUp(bottom, top)
