"""pycaffe_lite.coord_map (pycaffe's caffe.coord_map): maps worked out by hand from the layers'
geometry, and crops checked by running the net they build (a centre-tap kernel shifts the
image by a known amount)."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import layers as L
from pycaffe_lite import params as P
from pycaffe_lite.coord_map import (AxisMismatchException, compose, coord_map_from_to, crop,
                                    inverse)


def conv_pool_deconv(ks=3, pad=0, pool=2, dstride=2, dpad=0):
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 20, 20]))
    n.conv = L.Convolution(n.data, num_output=1, kernel_size=ks, pad=pad)
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=pool, stride=pool)
    n.deconv = L.Deconvolution(n.pool, convolution_param=dict(
        num_output=1, kernel_size=2 * dstride, stride=dstride, pad=dpad))
    return n


def test_maps_through_convolution_pooling_and_deconvolution():
    # data x -> conv x - 1 (3x3, no pad) -> pool (x - 1 - 0.5) / 2 -> deconv (k 4, s 2):
    # 2 y + 1.5, so deconv = x - 1 - 0.5 + 1.5 = x: the identity
    n = conv_pool_deconv()
    ax, a, b = coord_map_from_to(n.deconv, n.data)
    assert ax == 1 and np.all(a == 1) and np.all(b == 0)
    # pool 4, deconv (k 8, s 4): (x - 1 - 1.5) / 4 * 4 + 3.5 = x + 1 from data to deconv, so
    # the map from deconv back to data is y - 1
    n = conv_pool_deconv(pool=4, dstride=4)
    ax, a, b = coord_map_from_to(n.deconv, n.data)
    assert ax == 1 and np.all(a == 1) and np.all(b == -1)
    # padding the convolution by p moves the map by -p, padding the deconvolution by +p
    n = conv_pool_deconv(pad=3)
    assert np.all(coord_map_from_to(n.deconv, n.data)[2] == -3)
    n = conv_pool_deconv(dpad=2)
    assert np.all(coord_map_from_to(n.deconv, n.data)[2] == 2)


def test_anisotropic_kernels_map_each_axis_on_its_own():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 20, 20]))
    n.conv = L.Convolution(n.data, num_output=1, kernel_size=[3, 5], stride=[1, 2],
                           pad=[0, 1], dilation=[1, 2])
    n.relu = L.ReLU(n.conv, in_place=True)
    ax, a, b = coord_map_from_to(n.relu, n.data)
    # height: extent 3, stride 1, pad 0: conv = x - 1; width: extent (5 - 1) * 2 + 1 = 9,
    # stride 2, pad 1: conv = (x + 1 - 4) / 2, so data = 2 conv + 3
    assert ax == 1
    np.testing.assert_array_equal(a, [1, 2])
    np.testing.assert_array_equal(b, [1, 3])


def test_compose_and_inverse():
    assert compose((None, 2, 1), (1, 3, 4)) == (1, 6, 9)
    assert inverse((1, 2.0, 3.0)) == (1, 0.5, -1.5)
    with pytest.raises(AxisMismatchException):
        compose((1, 1, 0), (2, 1, 0))


def run(n, out, tmp_path):
    """Load the NetSpec's text as a net, give it centre-tap kernels, run a random image."""
    path = tmp_path / "net.prototxt"
    path.write_text(str(n.to_proto()))
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(0)
    image = rng.standard_normal(net.blobs["data"].shape).astype(np.float32)
    for name, param in net.params.items():  # centre taps: each output copies one input
        w = param[0].data
        w[...] = 0
        w[:, :, w.shape[2] // 2, w.shape[3] // 2] = 1
        if len(param) > 1:
            param[1].data[...] = 0
    return image, net.forward(data=image, blobs=[out])[out]


def test_crop_cuts_a_convolution_input_to_its_output(tmp_path):
    # a 3x3 convolution without pad: output (i, j) is input (i + 1, j + 1); cropping the
    # input to the output takes offset 1 and gives the output itself
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 7, 6]))
    n.conv = L.Convolution(n.data, num_output=1, kernel_size=3)
    n.cropped = crop(n.data, n.conv)
    text = str(n.to_proto())
    assert "axis: 2" in text and "offset: 1" in text
    image, cropped = run(n, "cropped", tmp_path)
    np.testing.assert_array_equal(cropped, image[:, :, 1:6, 1:5])


def test_crop_cuts_a_deconvolution_back_to_its_input(tmp_path):
    # a 3x3 stride-1 deconvolution without pad writes input (i, j) to output (i + 1, j + 1)
    # (centre tap) and makes the output 2 larger: cropping it to the input by offset 1 gives
    # the input back, FCN's crop(upscore, data)
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 5, 4]))
    n.up = L.Deconvolution(n.data, convolution_param=dict(num_output=1, kernel_size=3))
    n.score = crop(n.up, n.data)
    image, score = run(n, "score", tmp_path)
    np.testing.assert_array_equal(score, image)


def test_crop_refuses_what_cannot_be_cropped():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 20, 20]))
    n.ip = L.InnerProduct(n.data, num_output=3)
    n.other = L.Input(shape=dict(dim=[1, 1, 20, 20]))
    with pytest.raises(RuntimeError, match="connected by spatial layers"):
        coord_map_from_to(n.ip, n.other)
    m = conv_pool_deconv(pool=3)  # pooled 3x, upsampled 2x
    with pytest.raises(AssertionError, match="scale mismatch"):
        crop(m.deconv, m.data)
    m = conv_pool_deconv(dpad=10)  # the deconvolution's output is smaller than the input
    with pytest.raises(AssertionError, match="negative offset"):
        crop(m.deconv, m.data)
    with pytest.raises(caffe.CaffeError, match="_h/_w"):
        coord_map_from_to(L.Convolution(n.data, kernel_h=3, kernel_w=3), n.data)


@pytest.mark.parametrize("kind", ["ConvolutionDepthwise", "DepthwiseConvolution"])
def test_crop_through_the_forks_depthwise_convolutions(kind, tmp_path):
    # a depthwise convolution of a fork's type (MobileNet ports, soeaver's Xception) maps
    # coordinates as Convolution does: 3 x 3, stride 2, pad 1 centres output i on input 2 i
    # (x / 2); the 3 x 3 stride-2 deconvolution writes its input i to 2 i + 1, so the score
    # is the image moved by one: crop offset 1, and with centre taps the even rows and
    # columns of the image, zeros between
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 2, 11, 9]))
    n.dw = getattr(L, kind)(n.data, convolution_param=dict(num_output=2, group=2, kernel_size=3,
                                                           stride=2, pad=1))
    ax, a, b = coord_map_from_to(n.dw, n.data)
    assert ax == 1 and np.all(a == 2) and np.all(b == 0)  # from dw back to data: 2 y
    n.up = L.Deconvolution(n.dw, convolution_param=dict(num_output=2, group=2, kernel_size=3,
                                                        stride=2))
    n.score = crop(n.up, n.data)
    assert "offset: 1" in str(n.to_proto())
    image, score = run(n, "score", tmp_path)
    expected = np.zeros_like(image)
    expected[:, :, ::2, ::2] = image[:, :, ::2, ::2]
    np.testing.assert_array_equal(score, expected)
