"""MXNet operators, attribute by attribute, against real MXNet.

The references under tests/fixtures/mxnet_ops were written by MXNet 1.9.1's own CPU kernels
(``tools/mxnet_op_reference.py``, run in the venv of tools/mxnet_reference.py): per case a
symbol and params file, the inputs and MXNet's outputs. Each case imports and matches MXNet's
outputs to 1e-4 relative (with an absolute floor of 1e-4 times the output's largest
magnitude), or, where MXNet runs something Caffe cannot express, is refused at import by an
error naming the node, the op and the attribute. The ops whose conversion only picks or
copies values (Embedding's rows, Pad, max) give MXNet's outputs bit for bit.
"""

import json
import os

import numpy as np
import pytest

import pycaffe_lite
from pycaffe_lite import mxnet
from pycaffe_lite.errors import CaffeError

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "mxnet_ops")
with open(os.path.join(FIXTURES, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
CASES = sorted(k for k, v in MANIFEST.items() if "expect_error" not in v)
ERROR_CASES = sorted(k for k, v in MANIFEST.items() if "expect_error" in v)
RTOL = 1e-4
# cases whose Caffe layers select or copy values (Embed, Slice / Tile / DummyData / Concat,
# ArgMax's maximum): no arithmetic, so no rounding
EXACT = [k for k in CASES if k.startswith(("embedding_", "pad_", "max_"))]


def files(case):
    return (os.path.join(FIXTURES, case + "-symbol.json"),
            os.path.join(FIXTURES, case + "-0000.params"))


def inputs(case):
    return {k: np.load(os.path.join(FIXTURES, v["file"])).astype(np.float32)
            for k, v in MANIFEST[case]["inputs"].items()}


def references(case):
    return [np.load(os.path.join(FIXTURES, f)) for f in MANIFEST[case]["outputs"]]


def shapes(case):
    return {k: tuple(v.shape) for k, v in inputs(case).items()}


def run_case(case, tmp_path):
    prototxt, caffemodel, outputs = mxnet.to_caffe(*files(case), str(tmp_path / case),
                                                   shapes(case))
    net = pycaffe_lite.Net(prototxt, caffemodel, pycaffe_lite.TEST)
    for name, arr in inputs(case).items():
        net.blobs[name].data[...] = arr
    net.forward()
    return [net.blobs[b].data.copy() for b in outputs], outputs


@pytest.mark.parametrize("case", CASES)
def test_each_op_gives_mxnets_outputs(case, tmp_path):
    got, blobs = run_case(case, tmp_path)
    refs = references(case)
    assert len(got) == len(refs)
    for blob, out, ref in zip(blobs, got, refs):
        what = "%s: %s" % (case, blob)
        assert out.shape == ref.shape, "%s: shape %s, MXNet %s" % (what, out.shape, ref.shape)
        finite = ref[np.isfinite(ref)]  # (a division's inf and NaN must match as they are)
        scale = float(np.abs(finite).max()) if finite.size else 0.0
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=RTOL * scale, err_msg=what)


@pytest.mark.parametrize("case", EXACT)
def test_ops_that_copy_values_give_mxnets_bits(case, tmp_path):
    got, blobs = run_case(case, tmp_path)
    for blob, out, ref in zip(blobs, got, references(case)):
        np.testing.assert_array_equal(out, ref, err_msg="%s: %s" % (case, blob))


def test_the_exact_cases_are_there():
    # (renamed fixtures would empty EXACT, and its test would pass by running nothing)
    assert {k.split("_")[0] for k in EXACT} == {"embedding", "pad", "max"}, EXACT


# divisions of one blob by another: Caffe's reciprocal (Power -1) then a product, two float32
# roundings, so at most 1.5 units in the last place from MXNet's rounded quotient (1 / y
# rounds to (1 / y)(1 + d1), the product to x (1 / y)(1 + d1)(1 + d2), |d1|, |d2| <= 2^-24,
# and MXNet's quotient is itself within 2^-24 of x / y); 2 allowed
DIVISIONS = [k for k in CASES if k.startswith("div_")]


@pytest.mark.parametrize("case", DIVISIONS)
def test_divisions_are_within_two_ulps_of_mxnets_quotients(case, tmp_path):
    got, blobs = run_case(case, tmp_path)
    for blob, out, ref in zip(blobs, got, references(case)):
        what = "%s: %s" % (case, blob)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref), err_msg=what)
        inf = np.isinf(ref)
        np.testing.assert_array_equal(out[inf], ref[inf], err_msg=what)
        np.testing.assert_array_equal(np.signbit(out[ref == 0]), np.signbit(ref[ref == 0]),
                                      err_msg=what)
        finite = np.isfinite(ref)
        err = np.abs(out[finite].astype(np.float64) - ref[finite])
        assert np.all(err <= 2 * np.spacing(np.abs(ref[finite]))), what


def test_the_division_cases_are_there():
    # they hold MXNet's inf, -inf, NaN and signed zeros of divisions by and of 0
    assert sorted(DIVISIONS) == ["div_batch_channels", "div_channels", "div_equal",
                                 "div_scalars"]
    refs = np.concatenate([r.ravel() for r in references("div_equal")])
    assert np.isposinf(refs).any() and np.isneginf(refs).any() and np.isnan(refs).any()
    assert np.signbit(refs[refs == 0]).any() and not np.signbit(refs[refs == 0]).all()
    # x / 0 and 0 / x of signed zeros and infinities: inf, NaN and zeros of both signs
    zero_div, div_zero = references("div_scalars")[1:]
    assert np.isnan(zero_div).any() and np.signbit(zero_div[zero_div == 0]).any()
    assert np.isposinf(div_zero).any() and np.isneginf(div_zero).any()
    assert np.isnan(div_zero).any()


@pytest.mark.parametrize("case", ERROR_CASES)
def test_what_caffe_cannot_express_names_node_op_and_attribute(case, tmp_path):
    entry = MANIFEST[case]
    with pytest.raises(CaffeError) as info:
        mxnet.to_caffe(*files(case), str(tmp_path / case), shapes(case))
    message = str(info.value)
    assert "'%s'" % entry["expect_error"] in message
    for word in entry["error_words"]:
        assert word in message, (word, message)
    assert not os.path.exists(str(tmp_path / case) + ".prototxt")


@pytest.mark.parametrize("attrs, shape, words", [
    # MXNet 1.9.1 itself refuses these (its messages: "reflection padding only supports
    # padding sizes smaller than the input size", "expects padding on the first two axes to
    # be zero"); a file that holds one is refused naming the node and the reason
    ({"mode": "reflect", "pad_width": "(0, 0, 0, 0, 3, 0, 0, 0)"}, (1, 1, 3, 4),
     ["reflect pads 3, 0 of axis 2 (of size 3)", "smaller than the axis"]),
    ({"mode": "constant", "pad_width": "(0, 0, 1, 0, 0, 0, 0, 0)"}, (1, 1, 3, 4),
     ["pads the batch or channel axis"]),
    ({"mode": "edge", "pad_width": "(0, 0, 0, 0, 1, 1)"}, (1, 2, 3),
     ["4-D and 5-D"]),
    ({"mode": "symmetric", "pad_width": "(0, 0, 0, 0, 1, 1, 1, 1)"}, (1, 1, 3, 4),
     ["mode symmetric"]),
])
def test_pads_mxnet_refuses_too_are_refused_naming_the_node(tmp_path, attrs, shape, words):
    doc = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                     {"op": "Pad", "name": "pad0", "attrs": attrs, "inputs": [[0, 0, 0]]}],
           "arg_nodes": [0], "heads": [[1, 0, 0]]}
    path = tmp_path / "pad-symbol.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CaffeError) as info:
        mxnet.convert(str(path), None, {"data": shape})
    message = str(info.value)
    assert "MXNet node 'pad0' (op Pad)" in message
    for word in words:
        assert word in message, (word, message)
