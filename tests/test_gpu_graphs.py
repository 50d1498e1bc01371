"""CUDA graphs of TEST forwards on a real GPU (``@pytest.mark.gpu``): a replay gives exactly
what the layer-by-layer forward gives (the same kernels, cuDNN plans and buffers), inputs
written from the host between replays are seen, and a new shape is captured again.
tests/test_cuda_graphs.py covers the same logic on the simulated device."""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.proto import protoio

pytestmark = pytest.mark.gpu
ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "zoo")


@pytest.fixture(autouse=True)
def real_gpu():
    old = backend.use_device_module(None)
    backend.set_mode_gpu()
    yield
    cuda_graphs.set_enabled(True)
    backend.set_mode_cpu()
    backend.use_device_module(old)


def _net(name, batch):
    param = protoio.read_net_param(os.path.join(ZOO, name + "_deploy.prototxt"))
    for layer in param.layer:
        if layer.type == "Input":
            layer.input_param.shape[0].dim[0] = batch
    caffe.set_random_seed(1)
    net = caffe.Net(param, caffe.TEST)
    rng = np.random.default_rng(0)
    for blobs in net.params.values():
        for blob in blobs:
            fan_in = max(1, blob.count // max(1, blob.shape[0]))
            blob.data[...] = rng.normal(0, 1.0 / np.sqrt(fan_in), blob.shape)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            layer.blobs[1].data[...] = np.abs(layer.blobs[1].data) + 0.5
            layer.blobs[2].data[...] = 1.0
    return net


@pytest.mark.parametrize("name", ["resnet50", "googlenet", "squeezenet1.1"])
def test_a_replayed_forward_equals_the_eager_one_exactly(name):
    net = _net(name, 2)
    data, out = net.inputs[0], net.outputs[0]
    rng = np.random.default_rng(7)
    batches = [rng.uniform(-1, 1, net.blobs[data].shape).astype(np.float32) for _ in range(4)]
    cuda_graphs.set_enabled(False)
    eager = []
    for x in batches:
        net.blobs[data].data[...] = x
        net.forward_from_to()
        eager.append(net.blobs[out].data.copy())
    cuda_graphs.set_enabled(True)
    replayed = []
    for x in batches:
        net.blobs[data].data[...] = x
        net.forward_from_to()
        replayed.append(net.blobs[out].data.copy())
    state = net._cuda_graphs
    assert not state.refused and state.replays == 3  # warm-up, then capture + 3 replays
    assert not np.array_equal(eager[0], eager[1])  # the inputs matter
    for a, b in zip(eager, replayed):
        np.testing.assert_array_equal(b, a)


def test_a_new_batch_size_is_captured_again():
    net = _net("squeezenet1.1", 1)
    data, out = net.inputs[0], net.outputs[0]
    results = {}
    for batch in (1, 3, 1):
        net.blobs[data].reshape(batch, *net.blobs[data].shape[1:])
        x = np.random.default_rng(batch).uniform(-1, 1, net.blobs[data].shape)
        for _ in range(3):
            net.blobs[data].data[...] = x
            net.forward_from_to()
        results.setdefault(batch, []).append(net.blobs[out].data.copy())
    np.testing.assert_array_equal(results[1][0], results[1][1])
    assert results[3][0].shape[0] == 3 and net._cuda_graphs.replays >= 3


def test_net_surgery_between_replays_reaches_the_graph():
    """Weights written from the host after the capture: the replay reads them (as the eager
    forward with the same weights does), without capturing again."""
    net = _net("squeezenet1.1", 2)
    data, out = net.inputs[0], net.outputs[0]
    net.blobs[data].data[...] = np.random.default_rng(3).uniform(-1, 1, net.blobs[data].shape)
    for _ in range(3):
        net.forward_from_to()
    before = net.blobs[out].data.copy()
    conv = next(name for name in net.params if net.params[name][0].data.ndim == 4)
    net.params[conv][0].data[...] *= -1.0
    net.forward_from_to()
    replayed = net.blobs[out].data.copy()
    assert net._cuda_graphs.replays == 3
    cuda_graphs.set_enabled(False)
    net.forward_from_to()
    np.testing.assert_array_equal(replayed, net.blobs[out].data)
    assert not np.array_equal(replayed, before)


# ---- training iterations (solvers/train_graph.py) ----------------------------------------
def _train(net_text, graphs, steps, tmp_path, rule='type: "SGD" momentum: 0.9'):
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2
    from pycaffe_lite.solvers import get_solver

    cuda_graphs.set_enabled(graphs)
    param = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.02 lr_policy: "step" gamma: 0.5 stepsize: 3 '
                      'weight_decay: 0.0005 random_seed: 4 max_iter: 1000 display: 0 '
                      'snapshot_after_train: false snapshot_prefix: "%s" %s'
                      % (tmp_path / "snap", rule), param)
    text_format.Merge(net_text, param.net_param)
    solver = get_solver(param)
    rng = np.random.default_rng(3)
    shape = solver.net.blobs["data"].shape
    n = 4 * shape[0]
    solver.net.set_input_arrays(rng.uniform(0, 1, (n,) + shape[1:]).astype(np.float32),
                                rng.integers(0, 10, n).astype(np.float32))
    solver.step(steps)
    graph = solver.train_graph
    return [p.data.copy() for p in solver.net.learnable_params], graph


@pytest.mark.parametrize("which", ["lenet", "resnet_block", "inception"])
@pytest.mark.parametrize("rule", ['type: "SGD" momentum: 0.9',
                                  'type: "Adam" momentum: 0.9 momentum2: 0.999 delta: 1e-8'])
def test_a_replayed_training_run_equals_the_eager_one(which, rule, tmp_path):
    from test_train_graphs import NETS
    text = NETS[which][0]
    eager, _ = _train(text, False, 12, tmp_path, rule)
    got, graph = _train(text, True, 12, tmp_path, rule)
    assert graph.captures == 1 and graph.replays == 11
    for a, b in zip(got, eager):
        # the same kernels, plans and buffers; cuDNN's filter gradient may sum in another
        # order from one call to the next
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- a TEST net without a loss: nothing read back between forwards ------------------------------
@pytest.mark.parametrize("graphs", [True, False])
def test_each_batch_reaches_a_net_that_reads_nothing_back(graphs, tmp_path):
    """A net without a loss synchronises nothing between forwards: the host runs ahead of a
    busy GPU while the loading threads refill the batch buffers. Each forward must still get
    its own batch: records hold their index, so batch k's mean is known by hand."""
    from pycaffe_lite.data import db as dbmod
    from pycaffe_lite.data.datum import array_to_datum

    batch, distinct, iters = 256, 7, 35  # 7 different batches, each seen 5 times
    with dbmod.open_db(str(tmp_path / "db"), "lmdb", dbmod.NEW) as db:
        txn = db.transaction()
        for i in range(batch * distinct):
            txn.put(b"%08d" % i, array_to_datum(np.full((1, 4, 4), i, np.float32),
                                                0).SerializeToString())
        txn.commit()
    heavy = ['layer { name: "ip0" type: "InnerProduct" bottom: "data" top: "ip0" '
             'inner_product_param { num_output: 4096 } }']
    heavy += ['layer { name: "ip%d" type: "InnerProduct" bottom: "ip%d" top: "ip%d" '
              'inner_product_param { num_output: 4096 } }' % (k, k - 1, k) for k in range(1, 16)]
    text = ('layer { name: "data" type: "Data" top: "data" data_param { source: "%s" '
            'batch_size: %d backend: LMDB } }\n' % (tmp_path / "db", batch) + "\n".join(heavy)
            + '\nlayer { name: "m" type: "Reduction" bottom: "data" top: "m" '
            'reduction_param { operation: MEAN } }')
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2
    param = caffe_pb2.NetParameter()
    text_format.Merge(text, param)
    cuda_graphs.set_enabled(graphs)
    net = caffe.Net(param, caffe.TEST)
    seen = []
    for _ in range(iters):
        net.forward_from_to()
        seen.append(net.blobs["m"].read_data().copy())  # stays on the device: no wait
    got = [float(backend.to_host(m)) for m in seen]
    net.close()
    expected = [(k % distinct) * batch + (batch - 1) / 2.0 for k in range(iters)]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
