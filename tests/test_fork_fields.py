"""A binary file written by the DeepLab/PSPNet fork carries interp_param in field 143 (BVLC's
input_param): its net and its weights still read here."""

import numpy as np
from helpers.wire_bytes import fork_layer, length_delimited, string, tag, varint

import pycaffe_lite as caffe
from pycaffe_lite.proto import fork_fields, protoio
from pycaffe_lite.proto import caffe_pb2


def fork_interp_param(zoom_factor, pad_beg):
    """The fork's InterpParameter bytes: zoom_factor = 3, pad_beg = 5 (int32 varints)."""
    return tag(3, 0) + varint(zoom_factor) + tag(5, 0) + varint(pad_beg)


WEIGHTS = np.arange(2 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3) / 50 - 0.5
BIAS = np.array([0.25, -0.5], np.float32)


def fork_caffemodel():
    """A whole NetParameter as the fork writes it: Input, Convolution (with weights), Interp
    whose parameters sit in field 143."""
    shape = caffe_pb2.BlobShape(dim=[1, 3, 5, 4]).SerializeToString()
    input_param = length_delimited(1, shape)  # a real InputParameter in 143
    layers = [
        fork_layer("data", "Input", [], ["data"], length_delimited(143, input_param)),
        fork_layer("conv", "Convolution", ["data"], ["conv"],
                   b"".join(length_delimited(7, caffe.io.array_to_blobproto(a)
                                             .SerializeToString()) for a in (WEIGHTS, BIAS)) +
                   length_delimited(106, tag(1, 0) + varint(2) + tag(4, 0) + varint(3) +
                                    tag(3, 0) + varint(1))),
        fork_layer("interp", "Interp", ["conv"], ["interp"],
                   length_delimited(143, fork_interp_param(2, -1))),
    ]
    return string(1, "deeplab") + b"".join(length_delimited(100, layer) for layer in layers)


DEPLOY = """
name: "deeplab"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 5
        dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 2 kernel_size: 3 pad: 1 } }
layer { name: "interp" type: "Interp" bottom: "conv" top: "interp"
        interp_param { zoom_factor: 2 pad_beg: -1 } }
"""


def test_plain_parsing_leaves_the_fork_field_in_bvlcs():
    """Without the restore step the bytes are read, but as unknown fields of input_param."""
    param = caffe_pb2.NetParameter.FromString(fork_caffemodel())
    interp = param.layer[2]
    assert interp.HasField("input_param") and not interp.HasField("interp_param")
    assert fork_fields.restore(param) == 1
    assert not interp.HasField("input_param")
    assert interp.interp_param.zoom_factor == 2 and interp.interp_param.pad_beg == -1
    assert interp.interp_param.HasField("zoom_factor")
    assert not interp.interp_param.HasField("height")
    # the Input layer's real input_param (same number) is left alone
    assert list(param.layer[0].input_param.shape[0].dim) == [1, 3, 5, 4]
    assert fork_fields.restore(param) == 0  # nothing left to move


def test_reading_the_fork_binary_as_a_net(tmp_path):
    path = tmp_path / "deeplab.caffemodel"
    path.write_bytes(fork_caffemodel())
    param = protoio.read_net_param(str(path))
    interp = param.layer[2]
    assert interp.interp_param.zoom_factor == 2 and interp.interp_param.pad_beg == -1
    assert not interp.HasField("input_param")
    net = caffe.Net(str(path), caffe.TEST)  # the binary file as the net definition
    # 5 x 4, cropped by 1 at the start: 4 x 3, then zoomed by 2: 7 x 5
    assert net.blobs["interp"].data.shape == (1, 2, 7, 5)
    np.testing.assert_array_equal(net.params["conv"][0].data, WEIGHTS)


def test_copy_from_the_fork_binary(tmp_path):
    path = tmp_path / "deeplab.caffemodel"
    path.write_bytes(fork_caffemodel())
    proto = tmp_path / "deploy.prototxt"
    proto.write_text(DEPLOY)
    net = caffe.Net(str(proto), caffe.TEST)
    net.copy_from(str(path))
    np.testing.assert_array_equal(net.params["conv"][0].data, WEIGHTS)
    np.testing.assert_array_equal(net.params["conv"][1].data, BIAS)
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 4)).astype(np.float32)
    out = net.forward(data=x)
    assert out["interp"].shape == (1, 2, 7, 5)
    # and the same net built from the binary computes the same thing
    twin = caffe.Net(str(path), caffe.TEST)
    np.testing.assert_array_equal(twin.forward(data=x)["interp"], out["interp"])


def test_weights_reader_restores_the_field(tmp_path, monkeypatch):
    """copy_from's own read of the file moves field 143 too (what it hands on is right)."""
    from pycaffe_lite import weights

    path = tmp_path / "deeplab.caffemodel"
    path.write_bytes(fork_caffemodel())
    seen = []
    monkeypatch.setattr(weights, "copy_trained_layers_from_param",
                        lambda net, source, p: seen.append(source))
    weights.copy_trained_layers(None, str(path))
    interp = seen[0].layer[2]
    assert interp.interp_param.zoom_factor == 2 and not interp.HasField("input_param")
