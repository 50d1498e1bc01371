"""Cases from NVCaffe's and Intel Caffe's own C++ tests that check what those forks do
differently from BVLC Caffe: the fork's inputs and expected values as data, each check naming
the case it comes from, the expected values worked out by hand (or by a NumPy formula)."""

import numpy as np
import pytest

from pycaffe_lite.data.transformer import nvcaffe_resized_size
from pycaffe_lite.proto import caffe_pb2


def transform_param(**fields):
    p = caffe_pb2.TransformationParameter()
    for name, value in fields.items():
        setattr(p, name, value)
    return p


# ---- NVCaffe: DataTransformer::image_random_resize ----------------------------------------
def test_random_resize_of_a_4_by_5_image_to_2():
    # NVCaffe test_data_transformer.cpp TestVarSzImgRandomResize: a 4 x 5 image,
    # img_rand_resize_lower = upper = 2: the shorter side 4 -> 2, the other 5 * 2 / 4 = 2.5,
    # rounded half away from zero (std::lround): 2 x 3
    p = transform_param(img_rand_resize_lower=2, img_rand_resize_upper=2)
    assert nvcaffe_resized_size(p, 4, 5, None) == (2, 3)


@pytest.mark.parametrize("h, w, size, expected", [
    # 123 / 480 then times 720 in float32 is 184.5 -> 185 (float64: 184.49999999999997 ->
    # 184)
    (480, 720, 123, (123, 185)),
    # 133 / 360 in float32 is 0.36944443; times 540 is 199.49998 -> 199 (float64: 200)
    (360, 540, 133, (133, 199)),
    # 25 / 6 in float32 is 4.1666665; times 15 is 62.499996 -> 62 (float64: 63)
    (6, 15, 25, (25, 62)),
])
def test_random_resize_sides_are_float32_products(h, w, size, expected):
    # NVCaffe data_transformer.cpp image_random_resize: ``const float scale = new_size /
    # img_height`` and ``float new_fwidth = scale * img_width``, then std::lround of the float
    p = transform_param(img_rand_resize_lower=size, img_rand_resize_upper=size,
                        allow_upscale=True)
    assert nvcaffe_resized_size(p, h, w, None) == expected
    # the same products by hand in float32
    f = np.float32
    assert int(np.floor(f(size) / f(h) * f(w) + f(0.5))) == expected[1]
