"""Shared helpers of the ONNX tests: one-layer nets with random weights, onnxruntime runs."""

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite.proto import caffe_pb2

onnx = pytest.importorskip("onnx", reason="onnx is a test dependency")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")

RTOL = 1e-5


def net_from_text(text, phase=caffe_pb2.TEST):
    param = caffe_pb2.NetParameter()
    text_format.Merge(text, param)
    param.state.phase = phase
    return caffe.Net.from_param(param)


def input_layers(shapes):
    out = []
    for name, shape in shapes.items():
        dims = " ".join("dim: %d" % d for d in shape)
        out.append('layer { name: "%s" type: "Input" top: "%s" input_param { shape { %s } } }'
                   % (name, name, dims))
    return "\n".join(out)


def fill_random(net, seed=0):
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        for i, blob in enumerate(layer.blobs):
            if layer.type == "BatchNorm":
                blob.data[...] = [rng.normal(0, 0.5, blob.shape), rng.uniform(0.5, 2.0, blob.shape),
                                  np.full(blob.shape, 0.5)][i]
            elif layer.type == "BN" and i == 3:  # PSPNet's running variance
                blob.data[...] = rng.uniform(0.5, 2.0, blob.shape)
            else:
                blob.data[...] = rng.normal(0, 0.5, blob.shape)
    return rng


# Below this many bytes of weights and inputs a session runs on one intra-op thread: starting
# the default pool costs more than it gains on such tensors (the one-layer sweeps create
# thousands of sessions); larger nets keep onnxruntime's default pool.
SMALL_RUN = 4 << 20


def session_options(model_bytes, feeds):
    """onnxruntime's SessionOptions for a run of ``model_bytes`` on ``feeds``."""
    options = ort.SessionOptions()
    if len(model_bytes) + sum(np.asarray(v).nbytes for v in feeds.values()) < SMALL_RUN:
        options.intra_op_num_threads = 1
    return options


def run_ort(model, feeds):
    data = model.SerializeToString()
    sess = ort.InferenceSession(data, session_options(data, feeds),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}  # a blob read only for its shape is no input
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))


def assert_close(ours, theirs, what, rtol=RTOL):
    ours = np.asarray(ours)
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape, "%s: shape %s vs %s" % (what, ours.shape, theirs.shape)
    # relative to each entry, with a floor of rtol times the largest magnitude for entries
    # near zero (float32 sums of terms that cancel)
    atol = rtol * max(1.0, float(np.abs(ours).max()))
    np.testing.assert_allclose(theirs, ours, rtol=rtol, atol=atol, err_msg=what)
