"""GPU mode on the simulated device (pycaffe_lite.testing.simdevice): runs on every machine.

The simulated device keeps device arrays apart from host arrays and refuses what CuPy refuses
(mixing host arrays into device computations, implicit conversions), counting every
host<->device crossing. Here:

- every registered layer type runs forward and backward in GPU mode and must give the CPU
  results (float32, ``rtol=1e-5, atol=1e-6``: both sides run NumPy underneath, so any
  difference is a bug, not rounding). Non-data layers must not copy anything device->host
  while they run (``forbid("to_host")``) and must leave their tops' data on the device;
- a short LeNet-style training run (SGD and Adam) gives the CPU weights, with no array copied
  device->host during the steps (only the loss scalar is read, once per iteration, as Caffe
  reads it), the solver state on the device and snapshots written from host copies;
- the sync state machine, the prefetching data layers (pinned buffers, device push from the
  loading thread) and the engine selection are checked directly.
"""

import os

import threading

import numpy as np
import pytest
from helpers.gpu_cases import (CASES, EXCLUDED, SOLVERS, STEPS, _u, case, case_ids, make_solver,
                       make_sources, run_case, weights)

from pycaffe_lite import backend, cuda_graphs, syncedmem
from pycaffe_lite.blob import Blob
from pycaffe_lite.layers import create_layer, load_all
from pycaffe_lite.registry import LAYERS
from pycaffe_lite.testing import layer_param
from pycaffe_lite.testing.simdevice import DeviceArray, HostTransferError, simulated_device

RTOL, ATOL = 1e-5, 1e-6  # float32; both modes compute with NumPy here
# Scalars a GPU training iteration reads back layer by layer: the loss (Layer.Forward returns
# it as a Python float, as Caffe's Forward returns a Dtype) and the label check of
# SoftmaxWithLoss. No array. A captured iteration (solvers/train_graph.py) reads one: the loss,
# with the label check's verdict folded in; the first iteration runs layer by layer.
SCALARS_PER_ITERATION = 2
SCALARS_PER_CAPTURED_ITERATION = 1


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return make_sources(tmp_path_factory.mktemp("gpu_sources"))


def test_every_built_in_layer_type_has_a_case():
    load_all()
    builtin = {name for name, cls in LAYERS.items()
               if cls.__module__.startswith("pycaffe_lite.layers.")}  # not tests' own types
    covered = {c.type for c in CASES} | set(EXCLUDED)
    missing = sorted(builtin - covered)
    assert not missing, "layer types without a GPU-mode parity case: %s" % missing


@pytest.fixture
def pydir(sources, monkeypatch):
    monkeypatch.syspath_prepend(sources["_dir"])
    return sources


@pytest.mark.parametrize("c", CASES, ids=case_ids())
def test_layer_forward_backward_gpu_equals_cpu(c, pydir):
    expected = run_case(c, pydir, gpu=False)
    with simulated_device() as dev:
        got = run_case(c, pydir, gpu=True, forbid=lambda: dev.forbid("to_host"), tag="gpu")
        crossings = dev.counts()
    for i, (a, b) in enumerate(zip(expected[0], got[0])):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg="top %d data" % i)
    for i, (a, b) in enumerate(zip(expected[1], got[1])):
        if a is not None:
            np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg="bottom %d diff" % i)
    for i, ((da, ga), (db, gb)) in enumerate(zip(expected[2], got[2])):
        np.testing.assert_allclose(db, da, rtol=RTOL, atol=ATOL, err_msg="param %d data" % i)
        np.testing.assert_allclose(gb, ga, rtol=RTOL, atol=ATOL, err_msg="param %d diff" % i)
    if c.type == "HDF5Output":
        import h5py
        with h5py.File(pydir["h5out"] % "cpu") as f1, h5py.File(pydir["h5out"] % "gpu") as f2:
            np.testing.assert_array_equal(f2["data"][...], f1["data"][...])
    if not c.host_io:
        # computed on the device: the tops' data is current there, not written on the host
        for i, state in enumerate(got[3]):
            assert state is None or state in (syncedmem.HEAD_AT_GPU, syncedmem.SYNCED), \
                "top %d of %s left in state %s after a GPU forward" % (i, c.type, state)
        if c.bottoms and any(state is not None for state in got[3]):
            assert crossings["to_device"] >= 1  # the bottoms went up


@pytest.mark.parametrize("graphs", [True, False], ids=["captured", "layer_by_layer"])
@pytest.mark.parametrize("kind", sorted(SOLVERS))
def test_short_training_run_gpu_equals_cpu_without_host_round_trips(kind, graphs, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(cuda_graphs, "_settings", {"enabled": graphs})
    cpu = make_solver(kind, tmp_path)
    cpu.step(STEPS)
    expected = weights(cpu.net)
    expected_state = [np.array(h) for h in cpu.history]

    with simulated_device() as dev:
        backend.set_mode_gpu()
        gpu = make_solver(kind, tmp_path)
        assert all(isinstance(h, DeviceArray) for h in gpu.history)  # state lives on the device
        before = dev.counts()
        with dev.forbid("to_host"):
            gpu.step(STEPS)
        after = dev.counts()
        assert after["to_host"] == before["to_host"]
        reads = SCALARS_PER_ITERATION * STEPS if not graphs else \
            SCALARS_PER_ITERATION + SCALARS_PER_CAPTURED_ITERATION * (STEPS - 1)
        assert after["scalar_sync"] - before["scalar_sync"] == reads
        assert dev.graph_captures == (1 if graphs else 0)
        assert dev.graph_launches == (STEPS - 1 if graphs else 0)
        for p in gpu.net.learnable_params:  # the weights were updated on the device
            assert p.data_state == syncedmem.HEAD_AT_GPU
        got = weights(gpu.net)  # inspection: copies to the host now
        assert dev.to_host == len(got)
        state = [backend.to_host(h) for h in gpu.history]
        backend.set_mode_cpu()
    # same float32 NumPy arithmetic on both sides: agreement to rounding of a few steps
    for a, b in zip(expected, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(expected_state, state):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_snapshot_moves_the_device_state_to_the_host_and_restores_it(tmp_path):
    with simulated_device() as dev:
        backend.set_mode_gpu()
        solver = make_solver("Adam", tmp_path)
        solver.step(2)
        history = [backend.to_host(h) for h in solver.history]
        trained = weights(solver.net)
        to_host = dev.to_host
        model = solver.snapshot()
        assert dev.to_host > to_host  # weights and state were copied down for the files
        state_file = model.replace(".caffemodel", ".solverstate")
        assert os.path.isfile(model) and os.path.isfile(state_file)
        fresh = make_solver("Adam", tmp_path)
        fresh.restore(state_file)
        assert fresh.iter == 2
        assert all(isinstance(h, DeviceArray) for h in fresh.history)
        for a, b in zip(history, fresh.history):
            np.testing.assert_array_equal(backend.to_host(b), a)
        for a, b in zip(trained, weights(fresh.net)):
            np.testing.assert_array_equal(b, a)
        # training on continues on the device
        with dev.forbid("to_host"):
            fresh.step(1)
        backend.set_mode_cpu()
    # the state files hold plain float32 arrays: a CPU solver reads them
    cpu = make_solver("Adam", tmp_path)
    cpu.restore(state_file)
    for a, b in zip(history, cpu.history):
        np.testing.assert_array_equal(b, a)


# ---- data layers: pinned buffers, upload in the loading thread -----------------------------------
def test_prefetching_data_layer_uploads_batches_from_pinned_buffers(sources):
    text = ('type: "Data" data_param { source: "%s" batch_size: 2 backend: LMDB }'
            % sources["lmdb"])
    with simulated_device() as dev:
        backend.set_mode_gpu()
        layer = create_layer(layer_param(text), dtype=np.float32)
        top = [Blob((), np.float32), Blob((), np.float32)]
        try:
            layer.SetUp([], top)
            assert dev.pinned_allocations >= 2 * (layer.prefetch_count + 1)
            buffers = set()
            for _ in range(5):  # more batches than buffers: refilled buffers go up again
                with dev.forbid("to_device", "to_host"):
                    layer.Forward([], top)
                    # the loading thread copied the batch up; forward copied it, device to
                    # device, into the top's own buffer (the one a CUDA graph reads)
                    assert top[0].data_state == syncedmem.HEAD_AT_GPU
                    assert top[1].data_state == syncedmem.HEAD_AT_GPU
                    images = top[0].read_data() * 1  # consumed on the device, no copy
                assert isinstance(images, DeviceArray)
                buffers.add(id(top[0].synced_data))
            assert len(buffers) == 1
            expected = top[0].data.copy()
        finally:
            layer.close()
            backend.set_mode_cpu()
        uploads = [t for t in dev.transfers if t.kind == "to_device"]
        # every batch went up from a loading thread, none from the main thread
        assert uploads and all(t.thread.startswith("pycaffe-lite prefetch") for t in uploads)
    cpu = create_layer(layer_param(text), dtype=np.float32)
    cpu_top = [Blob((), np.float32), Blob((), np.float32)]
    cpu.SetUp([], cpu_top)
    for _ in range(5):
        cpu.Forward([], cpu_top)
    np.testing.assert_array_equal(cpu_top[0].data, expected)
    cpu.close()


def test_a_refilled_batch_goes_up_after_its_last_copy_into_the_tops(sources, monkeypatch):
    """The host does not wait for the device between forwards of a net without a loss: the
    loading thread waits for the event recorded after a batch's copy into the tops before it
    uploads the next batch into the same buffers (on a GPU that copy may still be queued)."""
    text = ('type: "Data" data_param { source: "%s" batch_size: 2 backend: LMDB }'
            % sources["lmdb"])
    events, late, refills = [], [], []

    class Event:
        def __init__(self, buffers):
            self.buffers, self.done = buffers, threading.Event()

        def synchronize(self):
            self.done.set()

    upload = backend.upload

    def checked_upload(synced_arrays):
        buffers = {id(a) for a in synced_arrays}
        earlier = [e for e in list(events) if e.buffers == buffers]
        if earlier:  # these buffers went through a forward before: a refill
            refills.append(len(earlier))
        late.extend(e for e in earlier if not e.done.is_set())
        upload(synced_arrays)

    with simulated_device():
        backend.set_mode_gpu()
        layer = create_layer(layer_param(text), dtype=np.float32)
        top = [Blob((), np.float32), Blob((), np.float32)]
        monkeypatch.setattr(backend, "record_event", lambda: events.append(Event(
            {id(b.synced_data) for b in layer._prefetcher._current.blobs})) or events[-1])
        monkeypatch.setattr(backend, "upload", checked_upload)
        try:
            layer.SetUp([], top)
            for _ in range(3 * (layer.prefetch_count + 1)):  # every buffer refilled twice
                layer.Forward([], top)
        finally:
            layer.close()
            backend.set_mode_cpu()
    n = layer.prefetch_count + 1  # the buffers
    assert len(events) == 3 * n  # one after each forward's copy
    # 3 n forwards took 3 n batches, at most n of them first fills: 2 n or more were refills
    # of buffers whose copies into the tops had been recorded, each waited for before it
    assert len(refills) >= 2 * n
    assert late == []


# ---- engines -------------------------------------------------------------------------------------
def test_engine_selection_without_cudnn(caplog, sources):
    from pycaffe_lite.ops.gpu import cudnn

    x = _u((2, 2, 6, 6))
    for engine in ("DEFAULT", "CAFFE", "CUDNN"):
        conv = ('type: "Convolution" convolution_param { num_output: 2 kernel_size: 3 '
                'engine: %s weight_filler { type: "gaussian" } }' % engine)
        pool = 'type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 engine: %s }'
        for text in (conv, pool % engine):
            c = case("x", text, [x])
            expected = run_case(c, sources, gpu=False)
            with simulated_device() as dev:
                got = run_case(c, sources, gpu=True, forbid=lambda: dev.forbid("to_host"))
            np.testing.assert_allclose(got[0][0], expected[0][0], rtol=RTOL, atol=ATOL)
    if not cudnn.available():  # no CuPy/cuDNN here: CUDNN asked for -> one warning, CAFFE
        warned = [r for r in caplog.records if "engine: CUDNN was asked for" in r.getMessage()]
        assert len(warned) <= 1
        assert all("using the CAFFE engine" in r.getMessage() for r in warned)


def test_cpu_only_machine_never_imports_cupy():
    import subprocess
    import sys

    code = ("import sys, pycaffe_lite, pycaffe_lite.ops.gpu, pycaffe_lite.layers; "
            "pycaffe_lite.layers.load_all(); "
            "from pycaffe_lite.testing.simdevice import simulated_device; "
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# ---- the simulated device itself -----------------------------------------------------------------
def test_simulated_device_refuses_what_cupy_refuses():
    with simulated_device() as dev:
        a = dev.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
        host = np.ones((2, 3), np.float32)
        with pytest.raises(TypeError, match="Implicit conversion"):
            np.asarray(a)
        with pytest.raises(TypeError, match="host numpy.ndarray"):
            a + host
        with pytest.raises(TypeError, match="host numpy.ndarray"):
            dev.maximum(a, host)
        with pytest.raises(ValueError, match="non-scalar numpy.ndarray"):
            a[...] = host
        with pytest.raises(TypeError):
            host[...] = a
        s = a.sum()
        assert isinstance(s, DeviceArray) and s.shape == ()  # reductions stay on the device
        assert dev.scalar_syncs == 0
        assert float(s) == 15.0 and dev.scalar_syncs == 1
        b = a.reshape(3, 2)  # views share device memory
        b[0, 0] = 7
        assert a[0, 0].item() == 7
        a += 1
        assert isinstance(a, DeviceArray) and a[0, 1].item() == 2
        with dev.forbid("to_host"):
            with pytest.raises(HostTransferError, match="to_host"):
                dev.asnumpy(a)
        np.testing.assert_array_equal(dev.asnumpy(a), [[8, 2, 3], [4, 5, 6]])
        assert dev.to_host == 1 and dev.to_device == 1
        assert [t.kind for t in dev.transfers] == ["to_device", "scalar_sync", "scalar_sync",
                                                   "scalar_sync", "to_host"]



# ---- device selection and device_query (a stand-in CuPy module: no GPU needed) ------------------
def _fake_cupy(count=2):
    import types

    used = []
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: count,
        getDeviceProperties=lambda i: {"name": b"Fake GPU %d" % i, "totalGlobalMem": 80 << 30,
                                       "major": 9, "minor": 0, "multiProcessorCount": 132,
                                       "clockRate": 1980000},
        runtimeGetVersion=lambda: 12040, driverGetVersion=lambda: 12060)
    device = lambda i: types.SimpleNamespace(use=lambda: used.append(i))  # noqa: E731
    mod = types.SimpleNamespace(__name__="cupy", __version__="13.3.0",
                                cuda=types.SimpleNamespace(runtime=runtime, Device=device))
    return mod, used


def test_device_selection_and_device_query(monkeypatch, capsys):
    from pycaffe_lite.cli import main

    mod, used = _fake_cupy(count=2)
    monkeypatch.setattr(backend, "_import_cupy", lambda: mod)
    old = backend.use_device_module(None)
    try:
        backend.set_device(1)
        backend.set_mode_gpu()
        assert used == [1] and backend.device_id() == 1
        backend.set_mode_cpu()
        backend.set_device(3)
        with pytest.raises(backend.GPUUnavailableError, match="GPU 3 does not exist: this "
                                                              "machine has 2 CUDA device"):
            backend.set_mode_gpu()
        assert backend.mode() == backend.CPU
        assert main(["device_query", "--gpu", "1"]) == 0
        out = capsys.readouterr().out
        assert "Fake GPU 1" in out and "Compute capability:            9.0" in out
        assert "85899345920 (80.0 GiB)" in out and "CUDA runtime / driver:         12.4 / 12.6" \
            in out
        assert main(["device_query", "--gpu", "all"]) == 0
        assert capsys.readouterr().out.count("Name:") == 2
    finally:
        backend.set_mode_cpu()
        backend.set_device(0)
        backend.use_device_module(old)
