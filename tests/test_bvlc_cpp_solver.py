"""BVLC Caffe's solver tests (src/caffe/test/test_gradient_based_solver.cpp, test_solver.cpp,
and sgd_solver.cpp's GetLearningRate) as checks of pycaffe-lite.

The least-squares net of test_gradient_based_solver.cpp: an HDF5Data layer (4 samples of
3 x 10 x 10 and one target each), an InnerProduct with one output whose weights and bias are
named 'weights' and 'bias', and a EuclideanLoss; in the "Share" cases the batch is sliced in
two halves, each through its own InnerProduct sharing those two params, and concatenated back.
With X the inputs (a column of ones appended for the bias), y the targets, w the weights and
the bias, and lambda the weight_decay (decay_mult 1 on the bias too), the gradient is

    g = (X^T X w - X^T y) / N + lambda * w

and the sharing net, or iter_size 2 over batches of 2 ("Accum"), must give the same one. The
rules' updates are computed here in float64 NumPy from Caffe's formulas (the ones BVLC's
ComputeLeastSquaresUpdate writes out) and every path an update can take is checked against
them: the host (one compiled pass, or the NumPy steps) and the device (simulated), one update
launch or a replayed CUDA graph.
"""

import types

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.layer import Layer
from pycaffe_lite.ops import solver_update
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import register_layer
from pycaffe_lite.solvers import SGDSolver, get_solver
from pycaffe_lite.solvers.lr_policy import get_policy, learning_rate
from pycaffe_lite.testing.simdevice import simulated_device

# BVLC's cases as a reference table: the slow tier (CI), not the everyday one
pytestmark = pytest.mark.slow

h5py = pytest.importorskip("h5py", reason="h5py is a test dependency (and the hdf5 extra)")

NUM, CHANNELS, HEIGHT, WIDTH = 4, 3, 10, 10
DIM = CHANNELS * HEIGHT * WIDTH
DELTA = float(np.float32(1e-8))  # SolverParameter.delta's default

# BVLC's "WithEverything" settings per rule: (base_lr, weight_decay, momentum); the RMSProp
# fixture sets rms_decay 0.95, the Adam fixture momentum 0.9 and momentum2 0.999.
EVERYTHING = {
    "SGD": (0.01, 0.5, 0.5),
    "Nesterov": (0.01, 0.5, 0.9),
    "AdaGrad": (0.01, 0.5, 0.0),
    "RMSProp": (0.01, 0.5, 0.0),
    "AdaDelta": (0.1, 0.1, 0.95),
    "Adam": (0.01, 0.5, 0.9),
}
RMS_DECAY, MOMENTUM2 = 0.95, 0.999

INNER_PRODUCT = """
layer { name: "%s" type: "InnerProduct" bottom: "%s" top: "%s"
        param { name: "weights" } param { name: "bias" }
        inner_product_param { num_output: 1
          weight_filler { type: "gaussian" std: 1.0 }
          bias_filler { type: "gaussian" std: 1.0 } } }
"""


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """(inputs, targets, the HDF5Data source list file) from a seeded generator."""
    folder = tmp_path_factory.mktemp("bvlc_solver_data")
    rng = np.random.default_rng(1701)
    x = rng.normal(size=(NUM, CHANNELS, HEIGHT, WIDTH)).astype(np.float32)
    y = rng.normal(size=(NUM, 1)).astype(np.float32)
    with h5py.File(folder / "solver_data.h5", "w") as f:
        f.create_dataset("data", data=x)
        f.create_dataset("targets", data=y)
    (folder / "solver_data_list.txt").write_text(str(folder / "solver_data.h5") + "\n")
    return x, y, folder / "solver_data_list.txt"


def net_text(source, share, batch_size):
    text = """name: "TestNetwork"
layer { name: "data" type: "HDF5Data" top: "data" top: "targets"
        hdf5_data_param { source: "%s" batch_size: %d } }
""" % (source, batch_size)
    if share:
        text += """layer { name: "slice" type: "Slice" bottom: "data" top: "data1" top: "data2"
        slice_param { axis: 0 } }"""
        text += INNER_PRODUCT % ("innerprod", "data1", "innerprod1")
        text += INNER_PRODUCT % ("innerprod2", "data2", "innerprod2")
        text += """layer { name: "concat" type: "Concat" bottom: "innerprod1"
        bottom: "innerprod2" top: "innerprod" concat_param { axis: 0 } }"""
    else:
        text += INNER_PRODUCT % ("innerprod", "data", "innerprod")
    return text + 'layer { name: "loss" type: "EuclideanLoss" bottom: "innerprod" ' \
                  'bottom: "targets" }'


def least_squares_solver(source, rule, iters, share=False, iter_size=1, extra="", more=""):
    """BVLC's RunLeastSquaresSolver setup (random seed 1701, lr_policy fixed)."""
    lr, decay, momentum = EVERYTHING[rule]
    param = caffe_pb2.SolverParameter()
    text_format.Merge('type: "%s" base_lr: %r weight_decay: %r momentum: %r lr_policy: "fixed" '
                      'max_iter: %d iter_size: %d rms_decay: %r momentum2: %r '
                      'snapshot_after_train: false random_seed: 1701 %s'
                      % (rule, lr, decay, momentum, iters, iter_size, RMS_DECAY, MOMENTUM2,
                         extra), param)
    text_format.Merge(net_text(source, share, NUM // iter_size) + more, param.net_param)
    caffe.set_random_seed(1701)
    return get_solver(param)


def host(array):
    return np.asarray(backend.to_host(array), np.float64)


def weights_and_bias(solver, what="data"):
    """The InnerProduct's weights and bias as one vector (bias last), as BVLC's w."""
    w, b = solver.net.params["innerprod"]
    return np.concatenate([host(getattr(w, what)).ravel(), host(getattr(b, what)).ravel()])


def least_squares_reference(rule, x, y, w0, iters):
    """[(w, update value, first history)] after each of ``iters`` updates, in float64."""
    lr, decay, momentum = (float(np.float32(v)) for v in EVERYTHING[rule])
    rms_decay, beta2 = float(np.float32(RMS_DECAY)), float(np.float32(MOMENTUM2))
    X = np.concatenate([x.reshape(NUM, DIM).astype(np.float64), np.ones((NUM, 1))], axis=1)
    y = y.astype(np.float64).ravel()
    w = w0.copy()
    history, second = np.zeros_like(w), np.zeros_like(w)
    out = []
    for it in range(iters):
        grad = (X.T @ (X @ w - y)) / NUM + decay * w
        if rule == "SGD":
            history = momentum * history + lr * grad
            update = history
        elif rule == "Nesterov":
            previous = history
            history = momentum * history + lr * grad
            update = (1 + momentum) * history - momentum * previous
        elif rule == "AdaGrad":
            history = history + grad ** 2
            update = lr * grad / (np.sqrt(history) + DELTA)
        elif rule == "RMSProp":
            history = rms_decay * history + (1 - rms_decay) * grad ** 2
            update = lr * grad / (np.sqrt(history) + DELTA)
        elif rule == "AdaDelta":
            history = momentum * history + (1 - momentum) * grad ** 2
            scaled = grad * np.sqrt((second + DELTA) / (history + DELTA))
            second = momentum * second + (1 - momentum) * scaled ** 2
            update = lr * scaled
        else:  # Adam: beta1 = momentum, t = it + 1
            t = it + 1
            history = momentum * history + (1 - momentum) * grad
            second = beta2 * second + (1 - beta2) * grad ** 2
            update = lr * np.sqrt(1 - beta2 ** t) / (1 - momentum ** t) * history / (
                np.sqrt(second) + DELTA)
        w = w - update
        out.append((w, update, history))
    return out


def run_on_path(path, monkeypatch, body):
    """``body()`` with the solver update on ``path``: "host" (as it comes: one compiled pass
    where the kernels are built), "per_param" (one compiled kernel per parameter where one
    takes the arrays, as where the params' arrays are not all of one kind), "numpy" (the
    per-parameter NumPy steps), "device" (GPU mode
    on the simulated device, one update launch) or "graphs" (there, replayed CUDA graphs)."""
    if path == "numpy":
        monkeypatch.setattr(solver_update, "ONE_PASS_RULES", ())
    if path == "per_param":
        monkeypatch.setattr(solver_update, "takes_all", lambda *args: False)
    if path in ("host", "numpy", "per_param"):
        return body()
    old = cuda_graphs.set_enabled(path == "graphs")
    try:
        with simulated_device():
            backend.set_mode_gpu()
            try:
                return body()
            finally:
                backend.set_mode_cpu()
    finally:
        cuda_graphs.set_enabled(old)


# BVLC test_gradient_based_solver.cpp: <Rule>SolverTest TestLeastSquaresUpdateWithEverything,
# ...WithEverythingShare (two InnerProducts sharing 'weights' and 'bias'), ...WithEverythingAccum
# and ...WithEverythingAccumShare (iter_size 2 over half batches equals one whole batch): the
# (K+1)th update, K = 0..4, against the least-squares formula.
@pytest.mark.parametrize("path", ["host", "per_param", "numpy", "device", "graphs"])
@pytest.mark.parametrize("share,iter_size", [(False, 1), (True, 1), (False, 2), (True, 2)],
                         ids=["everything", "share", "accum", "accum_share"])
@pytest.mark.parametrize("rule", sorted(EVERYTHING))
def test_least_squares_update_with_everything(samples, monkeypatch, rule, share, iter_size,
                                              path):
    x, y, source = samples
    iters = 5

    def body():
        solver = least_squares_solver(source, rule, iters, share, iter_size)
        # one update state per learnable param: the shared params are learned once
        assert len(solver.net.learnable_params) == 2
        w0 = weights_and_bias(solver)
        reference = least_squares_reference(rule, x, y, w0, iters)
        for k, (w, update, history) in enumerate(reference):
            solver.step(1)
            assert solver.iter == k + 1
            np.testing.assert_allclose(weights_and_bias(solver), w, rtol=1e-4, atol=1e-6,
                                       err_msg="after update %d" % (k + 1))
            # the diffs hold the update just applied (BVLC's precision: 1e-2 relative)
            np.testing.assert_allclose(weights_and_bias(solver, "diff"), update, rtol=1e-2,
                                       atol=1e-7)
            if rule == "SGD":  # CheckLeastSquaresUpdate: SGD's history is the update
                got = np.concatenate([host(h).ravel() for h in solver.history])
                np.testing.assert_allclose(got, history, rtol=1e-2, atol=1e-7)
        if share:
            for i in range(2):
                np.testing.assert_array_equal(host(solver.net.params["innerprod2"][i].data),
                                              host(solver.net.params["innerprod"][i].data))
        if path == "device":
            assert all(type(h).__name__ == "DeviceArray" for h in solver.history)
        if path == "graphs":
            assert solver.train_graph is not None and solver.train_graph.replays > 0

    run_on_path(path, monkeypatch, body)


@register_layer("BvlcSolverTestFloat64Param")
class Float64ParamLayer(Layer):
    """A layer of this test holding a float64 learnable param that takes no part in the loss
    (a Python layer may hold one): the params' arrays are then not all of one float type."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 0

    def setup(self, bottom, top):
        if not len(self.blobs):
            self.blobs.append(Blob((3,), np.float64))

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


# BVLC test_gradient_based_solver.cpp: <Rule>SolverTest TestLeastSquaresUpdateWithEverything,
# in a net with a param of another float type beside the InnerProduct's (no one compiled pass
# then, one kernel per param where one takes the arrays): each rule keeps its own update.
@pytest.mark.parametrize("rule", sorted(EVERYTHING))
def test_least_squares_update_beside_a_float64_param(samples, rule):
    x, y, source = samples
    solver = least_squares_solver(
        source, rule, 3, more='layer { name: "idle" type: "BvlcSolverTestFloat64Param" '
                              'bottom: "data" }')
    assert [p.data.dtype for p in solver.net.learnable_params] == \
        [np.float32, np.float32, np.float64]
    reference = least_squares_reference(rule, x, y, weights_and_bias(solver), 3)
    solver.step(3)
    np.testing.assert_allclose(weights_and_bias(solver), reference[-1][0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(weights_and_bias(solver, "diff"), reference[-1][1], rtol=1e-2,
                               atol=1e-7)


# BVLC test_gradient_based_solver.cpp: <Rule>SolverTest TestSnapshotShare (and TestSnapshot
# with snapshot_format: HDF5): 2k iterations straight equal k iterations, a snapshot, a new
# solver restored from it and k more: the params' data and diffs and the history, exactly.
@pytest.mark.parametrize("path", ["host", "graphs"])
@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
@pytest.mark.parametrize("rule", sorted(EVERYTHING))
def test_snapshot_share_resumes_exactly(samples, tmp_path, monkeypatch, rule, fmt, path):
    _, _, source = samples
    k = 2
    text = 'snapshot_format: %s snapshot_prefix: "%s/" ' % (fmt, tmp_path)

    def body():
        straight = least_squares_solver(source, rule, 2 * k, True, extra=text)
        straight.solve()
        first = least_squares_solver(source, rule, k, True,
                                     extra=text + "snapshot: %d snapshot_after_train: true" % k)
        first.solve()
        state = tmp_path / ("_iter_%d.solverstate%s" % (k, ".h5" if fmt == "HDF5" else ""))
        assert state.is_file()
        resumed = least_squares_solver(source, rule, 2 * k, True, extra=text)
        resumed.restore(str(state))
        assert resumed.iter == k
        resumed.solve()
        assert resumed.iter == straight.iter == 2 * k
        assert len(resumed.net.learnable_params) == 2
        for a, b in zip(straight.net.learnable_params, resumed.net.learnable_params):
            np.testing.assert_array_equal(host(b.data), host(a.data))
            np.testing.assert_array_equal(host(b.diff), host(a.diff))
        assert len(resumed.history) == len(straight.history) == 2 * len(resumed.state_names)
        for a, b in zip(straight.history, resumed.history):
            np.testing.assert_array_equal(host(b), host(a))

    run_on_path(path, monkeypatch, body)


# BVLC solver.cpp InitTestNets: the test nets of test_net_param and test_net come first, then
# (test_iter entries left over) instances of the generic net; each instance's state is TEST,
# then the net's own state, then its test_state (test_solver.cpp TestInitTrainTestNets: the
# 'with-softmax' stage includes the loss layer).
STAGED_NET = """name: "%s"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 5 dim: 2 dim: 3 dim: 4 } shape { dim: 5 } } }
layer { name: "innerprod" type: "InnerProduct" bottom: "data" top: "innerprod"
        inner_product_param { num_output: 10 } }
layer { name: "accuracy" type: "Accuracy" bottom: "innerprod" bottom: "label" top: "accuracy"
        exclude { phase: TRAIN } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "innerprod" bottom: "label"
        include { phase: TRAIN } include { phase: TEST stage: "with-softmax" } }
"""


def test_test_net_params_come_before_the_generic_net_instances():
    param = caffe_pb2.SolverParameter()
    text_format.Merge('lr_policy: "fixed" test_interval: 10 test_iter: 1 test_iter: 2 '
                      'test_iter: 3 test_state { } test_state { stage: "with-softmax" } '
                      'test_state { }', param)
    text_format.Merge(STAGED_NET % "generic", param.net_param)
    text_format.Merge(STAGED_NET % "own" + 'state { stage: "with-softmax" }',
                      param.test_net_param.add())
    solver = SGDSolver(param)
    assert [n.name for n in solver.test_nets] == ["own", "generic", "generic"]
    assert "loss" in solver.net.layer_names and "accuracy" not in solver.net.layer_names
    # the first keeps its own stage (an empty test_state adds none), the second's comes from
    # test_state, the third has none
    assert ["loss" in n.layer_names for n in solver.test_nets] == [True, True, False]
    assert all("accuracy" in n.layer_names for n in solver.test_nets)


# BVLC solver.cpp InitTestNets CHECKs ("test_iter must be specified for each test network"):
# a generic net (net / net_param) takes test_iter >= the test_net(_param) count, without one
# exactly that count; Caffe aborts, pycaffe-lite raises naming both counts.
@pytest.mark.parametrize("train,tests,iters,message", [
    ("train_net_param", 2, 1, r"2 test nets, 1 test_iter values"),
    ("train_net_param", 1, 2, r"1 test nets, 2 test_iter values"),
    ("net_param", 2, 1, r"2 test nets, 1 test_iter values"),
])
def test_test_iter_count_rules(train, tests, iters, message):
    param = caffe_pb2.SolverParameter()
    text_format.Merge('lr_policy: "fixed" test_interval: 1 ' + "test_iter: 1 " * iters, param)
    text_format.Merge(STAGED_NET % "train", getattr(param, train))
    for _ in range(tests):
        text_format.Merge(STAGED_NET % "test", param.test_net_param.add())
    with pytest.raises(CaffeError, match="test_iter must be specified for each test network "
                                         r"\(" + message):
        SGDSolver(param)


# BVLC sgd_solver.cpp GetLearningRate at the iterations where a policy turns: hand values of
# its formulas (rates are float32 as Caffe's Dtype).
@pytest.mark.parametrize("text,it,want", [
    ('lr_policy: "step" gamma: 0.1 stepsize: 5', 4, 0.01),
    ('lr_policy: "step" gamma: 0.1 stepsize: 5', 5, 0.001),
    ('lr_policy: "step" gamma: 0 stepsize: 5', 4, 0.01),  # pow(0, 0) = 1
    ('lr_policy: "exp" gamma: 0.5', 0, 0.01),
    ('lr_policy: "inv" gamma: 0.5 power: 2', 0, 0.01),
    ('lr_policy: "inv" gamma: 0.5 power: 2', 2, 0.01 / 4),
    ('lr_policy: "multistep" gamma: 0.1', 100, 0.01),  # no stepvalue: base_lr throughout
    ('lr_policy: "poly" power: 2 max_iter: 10', 5, 0.01 / 4),
    ('lr_policy: "poly" power: 2 max_iter: 10', 10, 0.0),
    ('lr_policy: "poly" power: 2 max_iter: 10', 12, 0.01 * 0.2 ** 2),  # (1 - 1.2)^2
    ('lr_policy: "sigmoid" gamma: 0.5 stepsize: 10', 10, 0.005),
    ('lr_policy: "sigmoid" gamma: 0.5 stepsize: 10', 0, 0.01 / (1 + np.exp(5))),
])
def test_learning_rate_at_the_turning_points(text, it, want):
    param = caffe_pb2.SolverParameter()
    text_format.Merge("base_lr: 0.01 " + text, param)
    state = types.SimpleNamespace(current_step=0)
    got = learning_rate(param, it, state, get_policy(param, "test"))
    assert got == pytest.approx(want, rel=1e-6, abs=1e-12)
    assert float(np.float32(got)) == got
