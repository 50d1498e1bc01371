import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs


def run(text, feat=(1, 1, 2, 3), img=(1, 3, 20, 30)):
    layer = make_layer('name: "pb" type: "PriorBox" prior_box_param { %s }' % text,
                       dtype=np.float32)
    bottom, top = random_blobs([feat, img], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, top[0].data


def test_prior_box_hand_computed():
    layer, out = run("min_size: 4 max_size: 9 aspect_ratio: 2 flip: true")
    # a 2 x 3 map on a 20 x 30 image: steps 10 (both), centres (5 + 10 w, 5 + 10 h)
    # per cell: 4 x 4, 6 x 6 (sqrt(4 * 9)), 4 sqrt2 x 4 / sqrt2, 4 / sqrt2 x 4 sqrt2
    assert layer.num_priors == 4 and out.shape == (1, 2, 2 * 3 * 4 * 4)
    boxes = out[0, 0].reshape(2, 3, 4, 4)
    r = np.sqrt(2.0)
    half = np.array([[2, 2], [3, 3], [2 * r, 2 / r], [2 / r, 2 * r]])
    for h in range(2):
        for w in range(3):
            cx, cy = 5 + 10 * w, 5 + 10 * h
            want = np.stack([(cx - half[:, 0]) / 30, (cy - half[:, 1]) / 20,
                             (cx + half[:, 0]) / 30, (cy + half[:, 1]) / 20], axis=1)
            np.testing.assert_allclose(boxes[h, w], want, rtol=1e-6)
    np.testing.assert_array_equal(out[0, 1], np.float32(0.1))


def test_prior_box_options():
    _, out = run("min_size: 4 aspect_ratio: 2 aspect_ratio: 2 flip: false clip: true "
                 "variance: 0.1 variance: 0.2 variance: 0.3 variance: 0.4 img_h: 40 img_w: 60 "
                 "step_h: 16 step_w: 8 offset: 0")
    boxes = out[0, 0].reshape(2, 3, 2, 4)
    r = np.sqrt(2.0)
    # repeated ratio dropped, no flip: 4 x 4 and 4 sqrt2 x 4 / sqrt2 per cell
    np.testing.assert_allclose(boxes[1, 2, 1], np.clip([(16 - 2 * r) / 60, (16 - 2 / r) / 40,
                                                        (16 + 2 * r) / 60, (16 + 2 / r) / 40],
                                                       0, 1), rtol=1e-6)
    assert boxes.min() == 0  # clipped at the top-left cell
    np.testing.assert_allclose(out[0, 1].reshape(-1, 4), [[0.1, 0.2, 0.3, 0.4]] * 12,
                               rtol=1e-6)


def test_prior_box_sizes_are_truncated_to_integers_as_in_the_fork():
    _, a = run("min_size: 4.7")
    _, b = run("min_size: 4")
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("text,pattern", [
    ("min_size: 0", r"prior_box_param min_size 0 must be positive"),
    ("min_size: -3", r"prior_box_param min_size -3 must be positive"),
    ("min_size: 30 max_size: 20", r"prior_box_param max_size 20 must be greater than its "
                                  r"min_size 30"),
    ("min_size: 30 max_size: 30", r"max_size 30 must be greater than its min_size 30"),
    ("min_size: 3 min_size: 4 max_size: 9", r"has 1 max_size values for 2 min_size values"),
    ("max_size: 9", r"needs at least one min_size"),
    ("min_size: 3 variance: 0.1 variance: 0.2", r"needs 1 or 4 variance values, got 2"),
    ("min_size: 3 img_size: 3 img_h: 4 img_w: 4", r"img_size or img_h/img_w, not both"),
])
def test_prior_box_errors(text, pattern):
    with pytest.raises(LayerError, match=r"layer 'pb' \(type PriorBox\): .*" + pattern):
        run(text)
