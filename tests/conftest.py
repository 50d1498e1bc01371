"""Shared test configuration: the tiers' markers and the fixtures every module may ask for.

Markers (registered in pyproject.toml; CONTRIBUTING.md describes the tiers):

- ``slow`` is set by hand on end-to-end tests; ``python -m pytest -m "not slow"`` is the
  everyday tier.
- ``mpi``, ``onnx``, ``opencv``, ``torch`` and ``fuzz`` are set here on every test of a module
  whose source uses that dependency (:data:`MODULE_MARKERS`), so a new module is marked without
  a line of its own.
- Tests marked ``gpu`` need a real NVIDIA GPU with CuPy and are skipped, with the reason, where
  ``pycaffe_lite.backend.gpu_available()`` is False. (GPU mode itself is tested everywhere on
  the simulated device: tests/test_gpu_simulated.py.)
"""

import os
import re

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)

# marker: what in a test module's source shows that it needs the dependency
MODULE_MARKERS = {
    "mpi": re.compile(r"\bmpiexec\b|\bmpi4py\b|helpers\.mpi\b"),
    "onnx": re.compile(r"^\s*(import|from) onnx|importorskip\(\s*[\"']onnx|helpers\.onnx_runtime",
                       re.M),
    "opencv": re.compile(r"^\s*import cv2\b|importorskip\(\s*[\"']cv2[\"']", re.M),
    "torch": re.compile(r"^\s*(import|from) torch\b|importorskip\(\s*[\"']torch[\"']", re.M),
    "fuzz": re.compile(r"^\s*(import|from) hypothesis\b", re.M),
}


def module_markers(source):
    """The markers of :data:`MODULE_MARKERS` that a module's source calls for."""
    return sorted(name for name, pattern in MODULE_MARKERS.items() if pattern.search(source))


def pytest_collection_modifyitems(config, items):
    markers_of = {}
    for item in items:
        path = str(item.fspath)
        if path not in markers_of:
            with open(path, encoding="utf-8") as f:
                markers_of[path] = module_markers(f.read())
        for name in markers_of[path]:
            item.add_marker(getattr(pytest.mark, name))
    _skip_gpu_tests_without_a_gpu(items)


class _ZooRelease:
    """filled_zoo_net's nets and the id of the last test (in run order, after selection) that
    names each as its ``key``: the net is released after that test (VGG-16's weights are half a
    gigabyte), and built again if a later test asks for it."""

    def __init__(self):
        self.nets, self.last = None, {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        self.last = {}
        for item in items:
            callspec = getattr(item, "callspec", None)
            key = callspec.params.get("key") if callspec is not None else None
            if key and "filled_zoo_net" in getattr(item, "fixturenames", ()):
                self.last[key] = item.nodeid

    def pytest_runtest_logfinish(self, nodeid):
        if self.nets is not None:
            for key, last in self.last.items():
                if last == nodeid:
                    self.nets.release(key)


_ZOO = _ZooRelease()


def pytest_configure(config):
    config.pluginmanager.register(_ZOO, "pycaffe_lite_zoo_release")


def _skip_gpu_tests_without_a_gpu(items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    from pycaffe_lite import backend

    if backend.gpu_available():
        return
    try:
        backend.device_module()
    except backend.GPUUnavailableError as exc:
        reason = "needs an NVIDIA GPU with CuPy: %s" % exc
    else:  # a device module was installed by hand (the simulated one): not a GPU
        reason = "needs an NVIDIA GPU with CuPy"
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def cupy_device():
    """CuPy as the device module (for the ``gpu`` tests); CPU mode again afterwards."""
    from pycaffe_lite import backend

    old = backend.use_device_module(None)
    yield
    backend.set_mode_cpu()
    backend.use_device_module(old)


@pytest.fixture
def cuda_graphs_on():
    """CUDA graphs on (the default) for the test, whatever an earlier one left; CPU mode
    afterwards."""
    from pycaffe_lite import backend, cuda_graphs

    old = cuda_graphs.set_enabled(True)
    yield
    cuda_graphs.set_enabled(old)
    backend.set_mode_cpu()


@pytest.fixture(scope="session")
def lenet_dir():
    """models/lenet: the LeNet example (prototxts, solver, the MNIST subset in mnist5k/)."""
    return os.path.join(ROOT, "models", "lenet")


@pytest.fixture(scope="session")
def mnist_lmdbs(tmp_path_factory, lenet_dir):
    """(train, test) LMDB paths of the whole MNIST subset (4,000 and 1,000 digits), converted
    once per session by ``pycaffe-lite convert_mnist``; tests only read them."""
    from pycaffe_lite import cli

    folder = tmp_path_factory.mktemp("mnist")
    data = os.path.join(lenet_dir, "mnist5k")
    for part, name in (("train", "mnist_train_lmdb"), ("t10k", "mnist_test_lmdb")):
        assert cli.main(["convert_mnist", os.path.join(data, part + "-images-idx3-ubyte.gz"),
                         os.path.join(data, part + "-labels-idx1-ubyte.gz"),
                         str(folder / name)]) == 0
    return folder / "mnist_train_lmdb", folder / "mnist_test_lmdb"


@pytest.fixture(scope="session")
def _trained_lenet_files(tmp_path_factory, mnist_lmdbs):
    from helpers.shared_nets import train_lenet

    return train_lenet(tmp_path_factory.mktemp("lenet"), mnist_lmdbs)


@pytest.fixture
def trained_lenet(_trained_lenet_files):
    """(folder, weights, net_param): LeNet after 60 iterations of the README's solver on the
    MNIST subset, trained once per session. The folder's files are read-only; ``net_param``
    (the train/test NetParameter, Data sources set to :func:`mnist_lmdbs`) is each test's own
    copy."""
    from pycaffe_lite.proto import caffe_pb2

    folder, weights, net_param = _trained_lenet_files
    own = caffe_pb2.NetParameter()
    own.CopyFrom(net_param)
    return folder, weights, own


@pytest.fixture(scope="session")
def filled_zoo_net():
    """``get(key) -> (net, x)``: a zoo deploy net (models/zoo, TEST, unfolded) with
    test_model_zoo.fill_random's weights and its input, built once per session for every
    module that runs it and released after the last test that names it as its ``key``
    parameter. The weights are read-only; a test that changes them builds its own net (see
    tests/helpers/shared_nets.py)."""
    from helpers.shared_nets import ZooNets

    nets = _ZOO.nets = ZooNets()
    yield nets.get
    _ZOO.nets = None
    nets.close()
