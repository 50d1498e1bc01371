"""Caffe's "Learning LeNet" tutorial notebook, run unchanged but for the import line (and the
file names and sizes of our MNIST subset: 4,000 training and 1,000 test digits)."""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe  # the one changed line: was `import caffe`
from pycaffe_lite import layers as L, params as P
from pycaffe_lite.data import convert_mnist

HERE = os.path.dirname(os.path.abspath(__file__))
MNIST = os.path.join(os.path.dirname(HERE), "models", "lenet", "mnist5k")


def lenet(lmdb, batch_size):
    # our version of LeNet: a series of linear and simple nonlinear transformations
    n = caffe.NetSpec()
    n.data, n.label = L.Data(batch_size=batch_size, backend=P.Data.LMDB, source=lmdb,
                             transform_param=dict(scale=1. / 255), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20,
                            weight_filler=dict(type='xavier'))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.conv2 = L.Convolution(n.pool1, kernel_size=5, num_output=50,
                            weight_filler=dict(type='xavier'))
    n.pool2 = L.Pooling(n.conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.fc1 = L.InnerProduct(n.pool2, num_output=500, weight_filler=dict(type='xavier'))
    n.relu1 = L.ReLU(n.fc1, in_place=True)
    n.score = L.InnerProduct(n.relu1, num_output=10, weight_filler=dict(type='xavier'))
    n.loss = L.SoftmaxWithLoss(n.score, n.label)
    return n.to_proto()


SOLVER = """
train_net: "mnist/lenet_auto_train.prototxt"
test_net: "mnist/lenet_auto_test.prototxt"
test_iter: 10
test_interval: 500
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: 10000
snapshot: 5000
snapshot_prefix: "mnist/lenet"
random_seed: 1
"""


@pytest.mark.slow
def test_learning_lenet_notebook_flow(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("mnist")
    convert_mnist(os.path.join(MNIST, "train-images-idx3-ubyte.gz"),
                  os.path.join(MNIST, "train-labels-idx1-ubyte.gz"), "mnist/mnist_train_lmdb",
                  progress=False)
    convert_mnist(os.path.join(MNIST, "t10k-images-idx3-ubyte.gz"),
                  os.path.join(MNIST, "t10k-labels-idx1-ubyte.gz"), "mnist/mnist_test_lmdb",
                  progress=False)

    with open('mnist/lenet_auto_train.prototxt', 'w') as f:
        f.write(str(lenet('mnist/mnist_train_lmdb', 64)))
    with open('mnist/lenet_auto_test.prototxt', 'w') as f:
        f.write(str(lenet('mnist/mnist_test_lmdb', 100)))
    with open('mnist/lenet_auto_solver.prototxt', 'w') as f:
        f.write(SOLVER)

    caffe.set_mode_cpu()
    solver = caffe.SGDSolver('mnist/lenet_auto_solver.prototxt')

    # each output is (batch size, feature dim, spatial dim)
    shapes = [(k, v.data.shape) for k, v in solver.net.blobs.items()]
    assert dict(shapes)["conv1"] == (64, 20, 24, 24)
    assert dict(shapes)["pool2"] == (64, 50, 4, 4)
    # just print the weight sizes (we'll omit the biases)
    weights = [(k, v[0].data.shape) for k, v in solver.net.params.items()]
    assert weights == [("conv1", (20, 1, 5, 5)), ("conv2", (50, 20, 5, 5)),
                       ("fc1", (500, 800)), ("score", (10, 500))]

    solver.net.forward()  # train net
    solver.test_nets[0].forward()  # test net (there can be more than one)
    assert solver.net.blobs['data'].data.shape == (64, 1, 28, 28)
    assert 0 <= solver.net.blobs['data'].data.min() and solver.net.blobs['data'].data.max() <= 1
    assert solver.test_nets[0].blobs['label'].data.shape == (100,)

    solver.step(1)
    # the first step's gradient on conv1's filters is there to look at
    assert np.abs(solver.net.params['conv1'][0].diff).sum() > 0
    # test net shares the train net's weights
    np.testing.assert_array_equal(solver.test_nets[0].params['conv1'][0].data,
                                  solver.net.params['conv1'][0].data)

    niter = 1000
    test_interval = 250
    # losses will also be stored in the log
    train_loss = np.zeros(niter)
    test_acc = np.zeros(int(np.ceil(niter / test_interval)) + 1)
    output = np.zeros((niter, 8, 10))

    # the main solver loop
    for it in range(niter):
        solver.step(1)  # SGD by Caffe

        # store the train loss
        train_loss[it] = solver.net.blobs['loss'].data

        # store the output on the first test batch
        # (start the forward pass at conv1 to avoid loading new data)
        solver.test_nets[0].forward(start='conv1')
        output[it] = solver.test_nets[0].blobs['score'].data[:8]

        # run a full test every so often
        # (Caffe can also do this for us and write to a log, but we show here
        #  how to do it directly in Python, where more complicated things are easier.)
        if it % test_interval == 0 or it == niter - 1:
            correct = 0
            for test_it in range(10):
                solver.test_nets[0].forward()
                correct += sum(solver.test_nets[0].blobs['score'].data.argmax(1)
                               == solver.test_nets[0].blobs['label'].data)
            test_acc[-1 if it == niter - 1 else it // test_interval] = correct / 1e3

    assert solver.iter == niter + 1
    assert train_loss[:20].mean() > 3 * train_loss[-100:].mean()
    assert test_acc[0] < 0.9          # after one step
    assert test_acc[-1] >= 0.96       # the training issue's figure for this subset
    # the first test batch's scores moved towards confident predictions
    assert np.abs(output[-1]).max() > np.abs(output[0]).max()
