"""Snapshots (binary and HDF5), restoring them, exact resumption, atomic writes and states
written by Caffe."""

import os
import struct

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.wire_bytes import varint

from pycaffe_lite.proto import protoio
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.layer import Layer
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import register_layer
from pycaffe_lite.solvers import AdamSolver, SGDSolver, get_solver
from helpers.solver import batches, feed, params_of, solver_param, tiny_net_text

h5py = pytest.importorskip("h5py", reason="h5py is a test dependency (and the hdf5 extra)")

FIXED = 'base_lr: 0.1 lr_policy: "fixed" momentum: 0.9 weight_decay: 0.01 '


def _solver(tmp_path, text="", cls=SGDSolver, net=None, seed=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    extra = 'snapshot_prefix: "%s" ' % (tmp_path / "snap")
    if seed is not None:
        extra += "random_seed: %d " % seed
    solver = cls(solver_param(FIXED + extra + text, net))
    return solver


def test_snapshot_file_names_and_contents(tmp_path, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver = _solver(tmp_path, "snapshot: 2 snapshot_diff: true")
    feed(solver.net, batches(3))
    solver.step(3)
    names = sorted(os.listdir(tmp_path))
    assert names == ["snap_iter_2.caffemodel", "snap_iter_2.solverstate"]
    assert "Snapshotting to binary proto file %s" % (tmp_path / "snap_iter_2.caffemodel") \
        in caplog.text
    assert "Snapshotting solver state to binary proto file %s" % (
        tmp_path / "snap_iter_2.solverstate") in caplog.text
    model = protoio.read_binary(str(tmp_path / "snap_iter_2.caffemodel"),
                                caffe_pb2.NetParameter())
    ip = [lp for lp in model.layer if lp.name == "ip"][0]
    assert len(ip.blobs) == 2 and len(ip.blobs[0].diff) == 6  # snapshot_diff keeps diffs
    state = protoio.read_binary(str(tmp_path / "snap_iter_2.solverstate"),
                                caffe_pb2.SolverState())
    assert state.iter == 2
    assert state.learned_net == str(tmp_path / "snap_iter_2.caffemodel")
    assert len(state.history) == 2 and list(state.history[0].shape.dim) == [2, 3]
    assert state.HasField("resume_state")


def test_hdf5_snapshot_file_names(tmp_path):
    solver = _solver(tmp_path, "snapshot: 1 snapshot_format: HDF5")
    solver.step(1)
    assert sorted(os.listdir(tmp_path)) == ["snap_iter_1.caffemodel.h5",
                                            "snap_iter_1.solverstate.h5"]
    with h5py.File(tmp_path / "snap_iter_1.solverstate.h5", "r") as f:
        assert int(f["iter"][0]) == 1
        assert f["learned_net"][()].decode() == str(tmp_path / "snap_iter_1.caffemodel.h5")
        assert sorted(f["history"]) == ["0", "1"]
    with h5py.File(tmp_path / "snap_iter_1.caffemodel.h5", "r") as f:
        assert f["data/ip/0"].shape == (2, 3)


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
@pytest.mark.parametrize("cls", [SGDSolver, AdamSolver])
def test_restore_continues_iteration_history_and_schedule(tmp_path, fmt, cls):
    text = ('lr_policy: "multistep" gamma: 0.5 stepvalue: 1 stepvalue: 3 '
            "snapshot_format: %s " % fmt)
    data = batches(6, seed=8)
    straight = _solver(tmp_path, text, cls, seed=3)
    feed(straight.net, data)
    straight.step(5)

    first = _solver(tmp_path, text, cls, seed=3)
    feed(first.net, data)
    first.step(2)
    first.snapshot()
    ext = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    resumed = _solver(tmp_path, text, cls, seed=99)  # other initial weights: restore replaces
    state = feed(resumed.net, data)
    state["i"] = 2
    resumed.restore(str(tmp_path / ("snap_iter_2" + ext)))
    assert resumed.iter == 2 and resumed.current_step == 1
    resumed.step(3)
    assert resumed.current_step == straight.current_step == 2
    np.testing.assert_array_equal(params_of(resumed)[0], params_of(straight)[0])
    np.testing.assert_array_equal(params_of(resumed)[1], params_of(straight)[1])
    for a, b in zip(resumed.history, straight.history):
        np.testing.assert_array_equal(a, b)


@register_layer("SnapshotTestCursor")
class CursorLayer(Layer):
    """A data layer for this test: serves rows of a fixed table in order, with a cursor that
    get_state/set_state expose (the contract of pycaffe-lite's data layers)."""

    exact_num_bottom_blobs = 0
    exact_num_top_blobs = 1
    table = np.arange(40, dtype=np.float32).reshape(20, 2) / 10.0

    def setup(self, bottom, top):
        self.cursor = 0

    def reshape(self, bottom, top):
        top[0].reshape((4, 2))

    def forward(self, bottom, top):
        rows = [(self.cursor + k) % len(self.table) for k in range(4)]
        top[0].data[...] = self.table[rows]
        self.cursor = (self.cursor + 4) % len(self.table)

    def get_state(self):
        return {"cursor": self.cursor, "seen": (self.cursor, np.int64(7))}

    def set_state(self, state):
        assert state["seen"] == (state["cursor"], 7)
        self.cursor = state["cursor"]


RANDOM_NET = """
name: "random"
layer { name: "noise" type: "DummyData" top: "x"
        dummy_data_param { shape { dim: 4 dim: 3 } data_filler { type: "gaussian" } } }
layer { name: "rows" type: "SnapshotTestCursor" top: "y" }
layer { name: "drop" type: "Dropout" bottom: "x" top: "xd" dropout_param { dropout_ratio: 0.3 } }
layer { name: "ip" type: "InnerProduct" bottom: "xd" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
def test_exact_resume_with_random_numbers_and_data_cursor(tmp_path, fmt):
    """N iterations, snapshot, restore in a fresh solver, N more == 2N uninterrupted, bit for
    bit: dropout masks and DummyData draw from the restored generator, the data layer
    continues from its restored cursor, and the test net runs at the same points."""
    text = ("snapshot_format: %s test_iter: 2 test_interval: 3 " % fmt)
    n = 4
    straight = _solver(tmp_path / "a", text, net=RANDOM_NET, seed=11)
    straight.step(2 * n)

    first = _solver(tmp_path / "b", text + "snapshot: %d" % n, net=RANDOM_NET, seed=11)
    first.step(n)
    ext = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    resumed = _solver(tmp_path / "c", text, net=RANDOM_NET, seed=11)
    resumed.net.layer_dict["rows"].cursor = 12  # a fresh solver has its own position
    resumed.restore(str(tmp_path / "b" / ("snap_iter_%d" % n + ext)))
    assert resumed.net.layer_dict["rows"].cursor == first.net.layer_dict["rows"].cursor
    resumed.step(n)
    for a, b in zip(resumed.net.learnable_params, straight.net.learnable_params):
        np.testing.assert_array_equal(a.data, b.data)
    assert resumed.test_scores == straight.test_scores


def test_resume_without_the_extra_state_still_differs(tmp_path):
    """The RNG part matters: restoring only Caffe's fields gives another run."""
    n = 3
    straight = _solver(tmp_path / "a", "", net=RANDOM_NET, seed=11)
    straight.step(2 * n)
    first = _solver(tmp_path / "b", "snapshot: %d" % n, net=RANDOM_NET, seed=11)
    first.step(n)
    path = tmp_path / "b" / ("snap_iter_%d.solverstate" % n)
    state = protoio.read_binary(str(path), caffe_pb2.SolverState())
    state.ClearField("resume_state")
    protoio.write_binary(state, str(path))
    resumed = _solver(tmp_path / "c", "", net=RANDOM_NET, seed=11)
    resumed.restore(str(path))
    resumed.step(n)
    assert not np.array_equal(resumed.net.params["ip"][0].data,
                              straight.net.params["ip"][0].data)


def _field(number, wire_type, payload):
    key = varint((number << 3) | wire_type)
    if wire_type == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def _caffe_blob_bytes(shape, values):
    """A BlobProto as Caffe's Blob::ToProto writes it: shape (7) then packed floats (5)."""
    dims = b"".join(varint(d) for d in shape)
    shape_msg = _field(1, 2, dims)
    data = struct.pack("<%df" % len(values), *values)
    return _field(7, 2, shape_msg) + _field(5, 2, data)


def test_restore_a_solverstate_written_by_caffe(tmp_path, caplog):
    """Bytes laid out by hand as Caffe's SGDSolver writes them (iter 1, learned_net 2,
    history 3, current_step 4), with a caffemodel next to it."""
    caplog.set_level("INFO", "pycaffe_lite")
    donor = _solver(tmp_path, "")
    donor.step(1)
    model_path = tmp_path / "caffe_iter_7.caffemodel"
    donor.net.save(str(model_path))
    W_hist = np.arange(6, dtype=np.float32) / 100
    b_hist = np.array([0.5, -0.5], np.float32)
    raw = (_field(1, 0, varint(7)) + _field(2, 2, str(model_path).encode()) +
           _field(3, 2, _caffe_blob_bytes([2, 3], W_hist)) +
           _field(3, 2, _caffe_blob_bytes([2], b_hist)) + _field(4, 0, varint(0)))
    state_path = tmp_path / "caffe_iter_7.solverstate"
    state_path.write_bytes(raw)
    solver = _solver(tmp_path, "", seed=1)
    solver.restore(str(state_path))
    assert solver.iter == 7
    np.testing.assert_array_equal(solver.history[0], W_hist.reshape(2, 3))
    np.testing.assert_array_equal(solver.history[1], b_hist)
    np.testing.assert_array_equal(solver.net.params["ip"][0].data,
                                  donor.net.params["ip"][0].data)
    assert "holds no random-generator or data-position state" in caplog.text


def test_restore_a_caffe_hdf5_solverstate(tmp_path):
    """Caffe's HDF5 layout: iter and current_step as 1-element int datasets, learned_net a
    string, history/0..n-1."""
    donor = _solver(tmp_path, "")
    donor.step(1)
    donor.net.save(str(tmp_path / "w.caffemodel.h5"))
    path = tmp_path / "caffe.solverstate.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("iter", data=np.array([5], np.int32))
        f.create_dataset("learned_net", data=np.bytes_(str(tmp_path / "w.caffemodel.h5")))
        f.create_dataset("current_step", data=np.array([0], np.int32))
        g = f.create_group("history")
        g.create_dataset("0", data=np.ones((2, 3), np.float32))
        g.create_dataset("1", data=np.full((2,), 2.0, np.float32))
    solver = _solver(tmp_path, "", seed=4)
    solver.restore(str(path))
    assert solver.iter == 5
    np.testing.assert_array_equal(solver.history[1], [2.0, 2.0])
    np.testing.assert_array_equal(solver.net.params["ip"][1].data,
                                  donor.net.params["ip"][1].data)


SIAMESE_NET = """
name: "siamese"
layer { name: "input" type: "Input" top: "a" top: "b"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "ip_a" type: "InnerProduct" bottom: "a" top: "za"
        param { name: "w" } param { name: "bias" }
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "ip_b" type: "InnerProduct" bottom: "b" top: "zb"
        param { name: "w" } param { name: "bias" }
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "za" bottom: "zb" top: "loss" }
"""


def test_restore_a_caffe_hdf5_snapshot_of_a_net_with_shared_params(tmp_path):
    """Caffe's Net::ToHDF5 writes a shared param's data only at its owner (ip_b's group is
    empty) and CopyTrainedLayersFromHDF5 accepts the missing datasets of shared params."""
    weight = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    bias = np.array([0.5, -0.5], np.float32)
    with h5py.File(tmp_path / "caffe_iter_3.caffemodel.h5", "w") as f:
        owner = f.create_group("data/ip_a")
        owner.create_dataset("0", data=weight)
        owner.create_dataset("1", data=bias)
        f.create_group("data/ip_b")
        f.create_group("data/input")
        f.create_group("data/loss")
    with h5py.File(tmp_path / "caffe_iter_3.solverstate.h5", "w") as f:
        f.create_dataset("iter", data=np.array([3], np.int32))
        f.create_dataset("learned_net", data=np.bytes_("caffe_iter_3.caffemodel.h5"))
        f.create_dataset("current_step", data=np.array([0], np.int32))
        f.create_dataset("history/0", data=np.full((2, 3), 0.25, np.float32))
        f.create_dataset("history/1", data=np.full((2,), 0.75, np.float32))
    solver = _solver(tmp_path, "", net=SIAMESE_NET)
    solver.restore(str(tmp_path / "caffe_iter_3.solverstate.h5"))
    assert solver.iter == 3
    for layer in ("ip_a", "ip_b"):
        np.testing.assert_array_equal(solver.net.params[layer][0].data, weight)
        np.testing.assert_array_equal(solver.net.params[layer][1].data, bias)
    np.testing.assert_array_equal(solver.history[0], np.full((2, 3), 0.25))
    # a param that owns its values must be in the file
    with h5py.File(tmp_path / "caffe_iter_3.caffemodel.h5", "a") as f:
        del f["data/ip_a/1"]
    with pytest.raises(CaffeError, match="ip_a"):
        solver.net.copy_from(str(tmp_path / "caffe_iter_3.caffemodel.h5"))


def test_restore_finds_the_weights_next_to_a_moved_state(tmp_path):
    solver = _solver(tmp_path / "old", "")
    solver.step(2)
    solver.snapshot()
    moved = tmp_path / "moved"
    os.rename(tmp_path / "old", moved)
    other = _solver(tmp_path / "x", "", seed=5)
    other.restore(str(moved / "snap_iter_2.solverstate"))
    np.testing.assert_array_equal(other.net.params["ip"][0].data,
                                  solver.net.params["ip"][0].data)


def test_restore_errors_are_explained(tmp_path):
    adam = _solver(tmp_path, "", AdamSolver)
    adam.step(1)
    adam.snapshot()
    sgd = _solver(tmp_path, "")
    with pytest.raises(CaffeError, match="incorrect length of history blobs: the state holds 4, "
                       "a SGDSolver on this net needs 2"):
        sgd.restore(str(tmp_path / "snap_iter_1.solverstate"))
    with pytest.raises(CaffeError, match="solver state file not found"):
        sgd.restore(str(tmp_path / "missing.solverstate"))
    os.remove(tmp_path / "snap_iter_1.caffemodel")
    with pytest.raises(CaffeError, match="refers to the weights file"):
        _solver(tmp_path, "", AdamSolver).restore(str(tmp_path / "snap_iter_1.solverstate"))


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
@pytest.mark.parametrize("crash_at", [0, 1])
def test_failed_write_keeps_the_previous_snapshot(tmp_path, monkeypatch, fmt, crash_at):
    """A crash mid-write (the final rename of the weights (0) or of the solver state (1) never
    happens) leaves the earlier file of that name intact and no temporary file behind."""
    solver = _solver(tmp_path, "snapshot_format: %s" % fmt)
    solver.step(1)
    solver.snapshot()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    solver.net.params["ip"][0].data[...] = 42  # the same names again, with new contents
    solver.history[0][...] = 7
    real_replace = os.replace
    calls = []

    def crash(src, dst):
        calls.append(dst)
        if len(calls) - 1 == crash_at:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(CaffeError):
        solver.snapshot()
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(after) == sorted(before)
    crashed = os.path.basename(calls[crash_at])
    assert after[crashed] == before[crashed]
    if crash_at == 1:  # the weights file before it was replaced completely
        model = [n for n in after if ".caffemodel" in n][0]
        assert after[model] != before[model]


def test_get_solver_restore_and_solve_from_files(tmp_path, monkeypatch):
    (tmp_path / "net.prototxt").write_text(tiny_net_text())
    (tmp_path / "solver.prototxt").write_text(
        FIXED + 'net: "net.prototxt" max_iter: 4 snapshot: 2 snapshot_prefix: "lenet" '
        'type: "Nesterov"')
    monkeypatch.chdir(tmp_path)
    solver = get_solver("solver.prototxt")
    solver.solve()
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("lenet")) == [
        "lenet_iter_2.caffemodel", "lenet_iter_2.solverstate",
        "lenet_iter_4.caffemodel", "lenet_iter_4.solverstate"]
    again = get_solver("solver.prototxt")
    again.solve("lenet_iter_2.solverstate")
    assert again.iter == 4


def test_solver_parameter_text_roundtrip_of_additions():
    param = caffe_pb2.SolverParameter()
    text_format.Merge('burn_in: 100 burn_in_power: 2 steps: 10 steps: 20 scales: 0.1 '
                      'scales: 0.5', param)
    again = caffe_pb2.SolverParameter.FromString(param.SerializeToString())
    assert again.burn_in == 100 and list(again.steps) == [10, 20]
    assert caffe_pb2.SolverParameter.DESCRIPTOR.fields_by_name["burn_in"].number >= 1000
    assert caffe_pb2.SolverState.DESCRIPTOR.fields_by_name["resume_state"].number >= 1000


def test_gpu_mode_snapshot_restore_and_mode_switch(tmp_path):
    """On the (simulated) device: the state moves with the mode, snapshots read it back to the
    host, restores write it to the device, and the results match a CPU run."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import simulated_device

    data = batches(4, seed=2)
    cpu = _solver(tmp_path / "cpu", "", AdamSolver, seed=5)
    feed(cpu.net, data)
    cpu.step(4)
    with simulated_device():
        try:
            gpu = _solver(tmp_path / "gpu", "", AdamSolver, seed=5)
            state = feed(gpu.net, data)
            gpu.step(1)  # on the CPU
            backend.set_mode_gpu()
            gpu.step(1)  # the state follows to the device
            assert all(type(h).__name__ == "DeviceArray" for h in gpu.history)
            gpu.snapshot()
            again = _solver(tmp_path / "gpu2", "", AdamSolver, seed=6)
            feed(again.net, data)["i"] = state["i"]
            again.restore(str(tmp_path / "gpu" / "snap_iter_2.solverstate"))
            assert all(type(h).__name__ == "DeviceArray" for h in again.history)
            again.step(2)
            got = [backend.to_host(p.read_data()).copy() for p in again.net.learnable_params]
        finally:
            backend.set_mode_cpu()
    for g, c in zip(got, cpu.net.learnable_params):
        np.testing.assert_allclose(g, c.data, rtol=1e-6, atol=1e-7)
