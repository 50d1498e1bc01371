"""MXNet models imported without MXNet give MXNet's outputs.

The references under tests/fixtures/mxnet were written by real MXNet 1.9.1
(``tools/mxnet_reference.py``, run in a venv of its own with MXNET_SUBGRAPH_BACKEND=NONE): the
symbol and params files as MXNet exports them, an input and MXNet's outputs for it. Every
output must match MXNet's to 1e-4 relative (element-wise, with an absolute floor of 1e-4 times
the output's largest magnitude for values near zero).
"""

import json
import os

import numpy as np
import pytest

from helpers.mxnet import (CASES, ERROR_CASES, FIXTURES, MANIFEST, MORE_MANIFEST,
                           assert_matches, files, inputs, ndarray_list, references, run)

import pycaffe_lite
from pycaffe_lite import mxnet
from pycaffe_lite.proto import protoio
from pycaffe_lite.errors import CaffeError

@pytest.mark.parametrize("case", CASES)
def test_written_files_give_mxnets_outputs(case, tmp_path):
    symbol, params = files(case)
    shapes = {k: tuple(v.shape) for k, v in inputs(case).items()}
    prototxt, caffemodel, outputs = mxnet.to_caffe(symbol, params, str(tmp_path / case),
                                                   shapes)
    assert prototxt == str(tmp_path / case) + ".prototxt"
    assert caffemodel == str(tmp_path / case) + ".caffemodel"
    first = protoio.read_net_param(prototxt).layer[:len(shapes)]
    assert [(lp.type, lp.top[0]) for lp in first] == [("Input", k) for k in shapes]
    net = pycaffe_lite.Net(prototxt, caffemodel, pycaffe_lite.TEST)
    for name in shapes:  # the Input layers carry the variables' names
        assert net.blobs[name].data.shape == shapes[name]
    run(net, case)
    refs = references(case)
    assert len(outputs) == len(refs)
    for i, (blob, ref) in enumerate(zip(outputs, refs)):
        assert_matches(net.blobs[blob].data, ref, "%s output %d (%s)" % (case, i, blob))


@pytest.mark.skipif(not MORE_MANIFEST, reason="no full-width references: write them with "
                    "tools/mxnet_reference.py DIR --full and set PYCAFFE_LITE_MXNET_REFERENCES=DIR")
@pytest.mark.parametrize("case", sorted(MORE_MANIFEST) or ["none"])
def test_full_width_zoo_models(case):
    shapes = {k: tuple(v.shape) for k, v in inputs(case).items()}
    net = mxnet.load(*files(case), shapes)
    run(net, case)
    _, outputs = mxnet.convert(*files(case), shapes)
    for blob, ref in zip(outputs, references(case)):
        assert_matches(net.blobs[blob].data, ref, case)


def test_load_builds_the_net():
    case = "resnet18_v1_narrow"
    net = mxnet.load(*files(case), input_shapes={"data": (1, 3, 64, 64)})
    assert isinstance(net, pycaffe_lite.Net)
    run(net, case)
    _, outputs = mxnet.convert(*files(case), {"data": (1, 3, 64, 64)})
    assert outputs == ["resnetv10_dense0_fwd"]
    assert_matches(net.blobs[outputs[0]].data, references(case)[0], case)
    # MXNet's max pool rounds down (32 -> 16) where Caffe's rounding would give 17
    assert net.blobs["resnetv10_pool0_fwd"].data.shape == (1, 8, 16, 16)


def test_fix_gamma_ignores_the_stored_gamma():
    """The embedding's BatchNorm has fix_gamma=True and a gamma far from 1 in the file: MXNet's
    outputs (which the case matches) use 1."""
    args, _ = mxnet.read_params(files("insightface_narrow")[1])
    assert np.abs(args["fc1_gamma"] - 1).max() > 0.1
    assert "fc7_weight" in args  # an array no node reads, accepted
    net_param, _ = mxnet.convert(*files("insightface_narrow"), {"data": (2, 3, 28, 28)})
    scale = [lp for lp in net_param.layer if lp.name == "fc1"][0]
    assert scale.type == "Scale"
    np.testing.assert_array_equal(scale.blobs[0].data, 1.0)


def test_gluon_scale_false_exports_fix_gamma():
    """ResNet v2's first BatchNorm(scale=False, center=False): fix_gamma in the JSON while the
    params file still holds a gamma; the case's outputs match MXNet's only if it is ignored."""
    symbol, params = files("resnet50_v2_narrow")
    with open(symbol) as f:
        doc = json.load(f)
    bn = [n for n in doc["nodes"] if n["op"] == "BatchNorm"][0]
    assert bn["attrs"]["fix_gamma"] == "True"
    args, _ = mxnet.read_params(params)
    gamma = doc["nodes"][bn["inputs"][1][0]]["name"]
    assert gamma.endswith("_gamma")
    assert np.abs(args[gamma] - 1).max() > 0.1


def test_an_empty_params_file_is_accepted():
    assert os.path.getsize(files("pooling_odd")[1]) <= 32
    args, aux = mxnet.read_params(files("pooling_odd")[1])
    assert (args, aux) == ({}, {})


@pytest.mark.parametrize("case", ERROR_CASES)
def test_what_caffe_cannot_express_is_an_error_naming_the_node(case, tmp_path):
    node = MANIFEST[case]["expect_error"]
    shapes = {k: tuple(v.shape) for k, v in inputs(case).items()}
    with pytest.raises(CaffeError, match="'%s'" % node):
        mxnet.to_caffe(*files(case), str(tmp_path / case), shapes)
    assert not os.path.exists(str(tmp_path / case) + ".prototxt")


def test_full_pooling_window_in_the_padding_is_what_mxnet_computes():
    """Why the error above: MXNet's 'full' pooling keeps a last window that starts in the
    padding, a row and a column of the lowest float for max pooling."""
    ref = references("pooling_full_padding_window")[0]
    assert ref.shape == (1, 2, 4, 4)
    assert np.all(ref[:, :, 3, :] <= -3e38) and np.all(ref[:, :, :, 3] <= -3e38)


def test_every_unsupported_op_is_listed_at_once():
    symbol = os.path.join(FIXTURES, "unsupported-symbol.json")
    with pytest.raises(CaffeError) as info:
        mxnet.convert(symbol, None, {"data": (1, 3, 4, 4)})
    message = str(info.value)
    assert symbol in message
    for op, node in (("topk", "top"), ("where", "select"), ("sin", "sine"), ("erf", "erf1")):
        assert "%s (node '%s')" % (op, node) in message


def test_gluon_data_needs_a_shape():
    with pytest.raises(CaffeError, match="variable 'data'.*--input-shape data="):
        mxnet.convert(*files("se_narrow"))
    with pytest.raises(CaffeError, match="'label', which is no variable"):
        mxnet.convert(*files("se_narrow"), {"data": (2, 3, 9, 9), "label": (2,)})


def test_a_missing_parameter_names_node_and_array(tmp_path):
    symbol, params = files("legacy_json")
    args, aux = mxnet.read_params(params)
    with open(params, "rb") as f:
        data = f.read()
    # the same file less its conv_bias: the keys come last, so rebuild it from the parser's view
    parsed = mxnet.parse_params(data, params)
    assert set(parsed) == {"arg:" + k for k in args} | {"aux:" + k for k in aux}
    del parsed["arg:conv_bias"]
    (tmp_path / "m.params").write_bytes(ndarray_list(parsed))
    with pytest.raises(CaffeError, match="node 'conv' .*'conv_bias' is not in the params"):
        mxnet.convert(symbol, str(tmp_path / "m.params"), {"data": (1, 2, 8, 8)})
