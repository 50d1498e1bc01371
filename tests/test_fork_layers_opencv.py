"""Nets with the fork layers, saved here (prototxt + .caffemodel), load in OpenCV's dnn module
(an independent implementation of the same forks' layers) and give our outputs."""

import numpy as np
import pytest

import pycaffe_lite as caffe

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

CONV = ('convolution_param {{ num_output: {n} kernel_size: 3 pad: 1 weight_filler {{ type: '
        '"gaussian" std: 0.4 }} bias_filler {{ type: "gaussian" std: 0.2 }} }}')


def conv(name, bottom, n):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" %s }'
            % (name, bottom, name, CONV.format(n=n)))


ROI_NET = """
name: "fast_rcnn"
input: "data" input_shape { dim: 2 dim: 3 dim: 12 dim: 10 }
input: "rois" input_shape { dim: 6 dim: 5 }
%s
layer { name: "pool" type: "ROIPooling" bottom: "conv" bottom: "rois" top: "pool"
        roi_pooling_param { pooled_h: 3 pooled_w: 2 spatial_scale: 0.5 } }
""" % conv("conv", "data", 4)

INTERP_NET = """
name: "pspnet"
input: "data" input_shape { dim: 2 dim: 3 dim: 7 dim: 6 }
%s
layer { name: "zoom" type: "Interp" bottom: "conv" top: "zoom"
        interp_param { zoom_factor: 3 } }
layer { name: "sized" type: "Interp" bottom: "conv" top: "sized"
        interp_param { height: 11 width: 17 } }
layer { name: "smaller" type: "Interp" bottom: "conv" top: "smaller"
        interp_param { height: 4 width: 5 } }
""" % conv("conv", "data", 4)

SHUFFLE_NET = """
name: "shufflenet"
input: "data" input_shape { dim: 2 dim: 3 dim: 5 dim: 4 }
%s
layer { name: "shuffle" type: "ShuffleChannel" bottom: "conv" top: "shuffle"
        shuffle_channel_param { group: 3 } }
""" % conv("conv", "data", 6)

DEPTHWISE_NET = """
name: "shufflenet_dw"
input: "data" input_shape { dim: 2 dim: 3 dim: 9 dim: 8 }
%s
layer { name: "dw" type: "ConvolutionDepthwise" bottom: "conv" top: "dw"
        convolution_param { num_output: 4 kernel_size: 3 stride: 2 pad: 1
                            weight_filler { type: "gaussian" std: 0.5 }
                            bias_filler { type: "gaussian" std: 0.2 } } }
""" % conv("conv", "data", 4)

SE_BLOCK = """
name: "senet"
input: "data" input_shape { dim: 2 dim: 3 dim: 6 dim: 5 }
%s
%s
layer { name: "squeeze" type: "Pooling" bottom: "x" top: "squeeze"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "excite" type: "InnerProduct" bottom: "squeeze" top: "excite"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.8 }
                              bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "gate" type: "Sigmoid" bottom: "excite" top: "excite" }
""" % (conv("x", "data", 4), conv("y", "data", 4))

# the fork's layer: top = a * x + y (bottoms a, x, y)
AXPY_NET = SE_BLOCK + """
layer { name: "axpy" type: "Axpy" bottom: "excite" bottom: "x" bottom: "y" top: "axpy" }
"""
# the same with the scale as N x C x 1 x 1, the form OpenCV's Axpy takes
AXPY4_NET = SE_BLOCK + """
layer { name: "gate4" type: "Reshape" bottom: "excite" top: "gate4"
        reshape_param { shape { dim: 0 dim: 0 dim: 1 dim: 1 } } }
layer { name: "axpy" type: "Axpy" bottom: "gate4" bottom: "x" bottom: "y" top: "axpy" }
"""
# the same computation as the SENet fork's README spells it without Axpy: Scale, then Eltwise
SCALE_SUM_NET = SE_BLOCK + """
layer { name: "scaled" type: "Scale" bottom: "x" bottom: "excite" top: "scaled"
        scale_param { axis: 0 } }
layer { name: "axpy" type: "Eltwise" bottom: "scaled" bottom: "y" top: "axpy" }
"""


def save_and_compare(tmp_path, text, inputs, outputs, seed=3):
    proto = tmp_path / "deploy.prototxt"
    proto.write_text(text)
    caffe.set_random_seed(seed)
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp_path / "deploy.caffemodel"
    net.save(str(weights))
    net.forward(**inputs)
    ours = {name: net.blobs[name].data.copy() for name in outputs}
    cvnet = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    for name in outputs:
        for key, value in inputs.items():
            cvnet.setInput(value, key)
        theirs = cvnet.forward(name)
        assert theirs.shape == ours[name].shape, name
        scale = float(np.abs(ours[name]).max())
        assert scale > 0.1, "%s is trivially small" % name
        np.testing.assert_allclose(ours[name], theirs, rtol=1e-5, atol=1e-6 * scale,
                                   err_msg=name)
    return ours


def test_roi_pooling(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 3, 12, 10)).astype(np.float32)
    rois = np.array([[0, 0, 0, 19, 23], [1, 4, 2, 12, 9], [1, 3, 3, 3, 3],
                     [0, 10, 14, 30, 40], [1, 6, 8, 2, 1], [0, 5, 1, 17, 21]], np.float32)
    ours = save_and_compare(tmp_path, ROI_NET, {"data": x, "rois": rois}, ["pool"])
    assert ours["pool"].shape == (6, 4, 3, 2)


def test_interp(tmp_path):
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 7, 6)).astype(np.float32)
    ours = save_and_compare(tmp_path, INTERP_NET, {"data": x}, ["zoom", "sized", "smaller"])
    assert ours["zoom"].shape == (2, 4, 19, 16)


def test_shuffle_channel(tmp_path):
    x = np.random.default_rng(2).uniform(-1, 1, (2, 3, 5, 4)).astype(np.float32)
    save_and_compare(tmp_path, SHUFFLE_NET, {"data": x}, ["shuffle"])


def test_convolution_depthwise(tmp_path):
    # (OpenCV 4.14 has no DepthwiseConvolution type; its checks are in the layer tests)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 3, 9, 8)).astype(np.float32)
    ours = save_and_compare(tmp_path, DEPTHWISE_NET, {"data": x}, ["dw"])
    assert ours["dw"].shape == (2, 4, 5, 4)


def axpy_run(tmp_path, text=AXPY_NET, num=2):
    x = np.random.default_rng(4).uniform(-1, 1, (num, 3, 6, 5)).astype(np.float32)
    text = text.replace("dim: 2 dim: 3 dim: 6 dim: 5", "dim: %d dim: 3 dim: 6 dim: 5" % num)
    proto = tmp_path / "deploy.prototxt"
    proto.write_text(text)
    caffe.set_random_seed(3)
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp_path / "deploy.caffemodel"
    net.save(str(weights))
    net.forward(data=x)
    return x, net, proto, weights


def test_axpy_against_opencvs_scale_and_eltwise(tmp_path):
    x, net, _, weights = axpy_run(tmp_path)
    ours = net.blobs["axpy"].data
    plain = tmp_path / "scale_sum.prototxt"
    plain.write_text(SCALE_SUM_NET)
    cvnet = cv2.dnn.readNetFromCaffe(str(plain), str(weights))
    cvnet.setInput(x)
    theirs = cvnet.forward("axpy")
    scale = float(np.abs(ours).max())
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6 * scale)
    a = net.blobs["excite"].data[:, :, None, None]
    np.testing.assert_allclose(ours, a * net.blobs["x"].data + net.blobs["y"].data,
                               rtol=1e-6, atol=1e-6)


def test_opencvs_axpy_scales_the_third_bottom(tmp_path):
    """OpenCV's importer turns Axpy into a Scale of bottom 2 plus bottom 1, i.e. a * y + x,
    where the SENet fork computes a * x + y (x, the block's branch; y, its shortcut). With x
    and y exchanged in the net OpenCV reads, the two agree. (OpenCV 4.14 takes the scale as
    1 x C x 1 x 1 only: one image.)"""
    x, net, proto, weights = axpy_run(tmp_path, AXPY4_NET, num=1)
    swapped_text = proto.read_text()
    ours = net.blobs["axpy"].data
    swapped = tmp_path / "swapped.prototxt"
    swapped.write_text(swapped_text.replace('bottom: "x" bottom: "y" top: "axpy"',
                                            'bottom: "y" bottom: "x" top: "axpy"'))
    cvnet = cv2.dnn.readNetFromCaffe(str(swapped), str(weights))
    cvnet.setInput(x)
    scale = float(np.abs(ours).max())
    np.testing.assert_allclose(ours, cvnet.forward("axpy"), rtol=1e-5, atol=1e-6 * scale)
    cvnet = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    cvnet.setInput(x)
    assert np.abs(cvnet.forward("axpy") - ours).max() > 0.1 * scale
