"""Nets that several test modules build the same way, built once per session
(tests/conftest.py's ``filled_zoo_net`` and ``trained_lenet`` fixtures).

What a test could change is protected: a shared net's weights are read-only NumPy arrays (a
write raises ``ValueError: assignment destination is read-only``), its input comes as a fresh
copy, and the trained LeNet's files are read-only on disk with its NetParameter copied for each
test. A test that must change weights builds its own net.
"""

import os
import stat

import numpy as np

import pycaffe_lite as caffe

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(os.path.dirname(TESTS), "models", "lenet")


def read_only_weights(net):
    """Make every weight array of ``net`` read-only (the arrays behind ``blob.data``)."""
    for blobs in net.params.values():
        for blob in blobs:
            arr = blob.data
            while isinstance(arr.base, np.ndarray):
                arr = arr.base
            arr.flags.writeable = False


class ZooNets:
    """The zoo's deploy nets (TEST, unfolded) with test_model_zoo.fill_random's weights for
    the seed the zoo tests use, and the input drawn from the same generator after them."""

    def __init__(self):
        self._nets = {}

    def get(self, key):
        """``(net, x)``: the shared net (weights read-only) and a copy of its input."""
        if key not in self._nets:
            self._nets[key] = self._build(key)
        net, x = self._nets[key]
        return net, x.copy()

    @staticmethod
    def _build(key):
        from test_model_zoo import fill_random, path

        caffe.set_random_seed(11)
        net = caffe.Net(path(key), caffe.TEST)
        rng = fill_random(net, seed=sum(map(ord, key)))
        x = rng.uniform(-1.0, 1.0, net.blobs["data"].shape).astype(np.float32)
        read_only_weights(net)
        x.flags.writeable = False
        return net, x

    def release(self, key):
        """Drop ``key``'s net (its last test has run); a later ``get`` builds it again."""
        entry = self._nets.pop(key, None)
        if entry is not None:
            entry[0].close()

    def close(self):
        for key in list(self._nets):
            self.release(key)


def train_lenet(folder, mnist_lmdbs):
    """LeNet after 60 iterations of the README's solver (random_seed 1) on the MNIST subset:
    ``(folder, weights path, the train/test NetParameter)``; the files are made read-only."""
    from pycaffe_lite.proto import protoio
    from pycaffe_lite.solvers import SGDSolver

    train_db, test_db = mnist_lmdbs
    net = protoio.read_net_param(os.path.join(LENET, "lenet_train_test.prototxt"))
    for layer in net.layer:
        if layer.type == "Data":
            layer.data_param.source = str(train_db if layer.include[0].phase == 0 else test_db)
    param = protoio.read_solver_param(os.path.join(LENET, "lenet_solver.prototxt"))
    param.ClearField("net")
    param.net_param.CopyFrom(net)
    param.snapshot_prefix = str(folder / "lenet")
    param.random_seed = 1
    solver = SGDSolver(param)
    solver.step(60)
    weights = folder / "lenet.caffemodel"
    solver.net.save(str(weights))
    solver.close()
    for entry in folder.iterdir():
        entry.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return folder, weights, net
