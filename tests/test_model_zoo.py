"""The model zoo's deploy nets (written out in tests/zoo/): the blob shapes Caffe gives them,
and, with random weights, a forward pass that survives a .caffemodel round trip and agrees with
OpenCV's independent Caffe importer (cv2.dnn.readNetFromCaffe).

Agreement with OpenCV is asserted with a relative tolerance of 1e-4 (plus an absolute 1e-4 of
the output's largest magnitude, for entries near zero); on these nets the two agree to about
1e-6.
"""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe

ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "zoo")
RTOL = 1e-4


def path(key):
    return os.path.join(ZOO, "%s_deploy.prototxt" % key)


# Shapes for a batch of one image, as Caffe computes them (pooling rounds up).
SHAPES = {
    "caffenet": {"data": (1, 3, 227, 227), "conv1": (1, 96, 55, 55), "pool1": (1, 96, 27, 27),
                 "norm1": (1, 96, 27, 27), "conv2": (1, 256, 27, 27), "pool2": (1, 256, 13, 13),
                 "conv3": (1, 384, 13, 13), "conv4": (1, 384, 13, 13),
                 "conv5": (1, 256, 13, 13), "pool5": (1, 256, 6, 6), "fc6": (1, 4096),
                 "fc7": (1, 4096), "fc8": (1, 1000), "prob": (1, 1000)},
    "alexnet": {"conv1": (1, 96, 55, 55), "norm1": (1, 96, 55, 55), "pool1": (1, 96, 27, 27),
                "conv2": (1, 256, 27, 27), "norm2": (1, 256, 27, 27),
                "pool2": (1, 256, 13, 13), "pool5": (1, 256, 6, 6), "fc8": (1, 1000),
                "prob": (1, 1000)},
    "googlenet": {"conv1/7x7_s2": (1, 64, 112, 112), "pool1/3x3_s2": (1, 64, 56, 56),
                  "conv2/3x3": (1, 192, 56, 56), "pool2/3x3_s2": (1, 192, 28, 28),
                  "inception_3a/1x1": (1, 64, 28, 28), "inception_3a/5x5": (1, 32, 28, 28),
                  "inception_3a/pool": (1, 192, 28, 28),
                  "inception_3a/output": (1, 256, 28, 28),
                  "inception_3b/output": (1, 480, 28, 28), "pool3/3x3_s2": (1, 480, 14, 14),
                  "inception_4a/output": (1, 512, 14, 14),
                  "inception_4d/output": (1, 528, 14, 14),
                  "inception_4e/output": (1, 832, 14, 14), "pool4/3x3_s2": (1, 832, 7, 7),
                  "inception_5b/output": (1, 1024, 7, 7), "pool5/7x7_s1": (1, 1024, 1, 1),
                  "loss3/classifier": (1, 1000), "prob": (1, 1000)},
    "vgg16": {"conv1_2": (1, 64, 224, 224), "pool1": (1, 64, 112, 112),
              "pool2": (1, 128, 56, 56), "conv3_3": (1, 256, 56, 56), "pool3": (1, 256, 28, 28),
              "pool4": (1, 512, 14, 14), "conv5_3": (1, 512, 14, 14), "pool5": (1, 512, 7, 7),
              "fc6": (1, 4096), "fc8": (1, 1000), "prob": (1, 1000)},
    "resnet50": {"conv1": (1, 64, 112, 112), "pool1": (1, 64, 56, 56),
                 "res2a_branch1": (1, 256, 56, 56), "res2a_branch2a": (1, 64, 56, 56),
                 "res2c": (1, 256, 56, 56), "res3a_branch2a": (1, 128, 28, 28),
                 "res3d": (1, 512, 28, 28), "res4f": (1, 1024, 14, 14),
                 "res5a_branch1": (1, 2048, 7, 7), "res5c": (1, 2048, 7, 7),
                 "pool5": (1, 2048, 1, 1), "fc1000": (1, 1000), "prob": (1, 1000)},
    "squeezenet1.1": {"conv1": (1, 64, 113, 113), "pool1": (1, 64, 56, 56),
                      "fire2/squeeze1x1": (1, 16, 56, 56), "fire2/concat": (1, 128, 56, 56),
                      "pool3": (1, 128, 28, 28), "fire5/concat": (1, 256, 28, 28),
                      "pool5": (1, 256, 14, 14), "fire9/concat": (1, 512, 14, 14),
                      "conv10": (1, 1000, 14, 14), "pool10": (1, 1000, 1, 1),
                      "prob": (1, 1000, 1, 1)},
    "v1_small": {"data": (1, 3, 32, 32), "conv1": (1, 16, 32, 32), "pool1": (1, 16, 16, 16),
                 "conv2": (1, 32, 16, 16), "pool2": (1, 32, 8, 8), "ip1": (1, 64),
                 "ip2": (1, 10), "prob": (1, 10)},
}

# (layers, Split layers Caffe inserts, learnable param blobs), counted from the architectures:
# - CaffeNet / AlexNet: input + 5 conv + 7 ReLU + 3 pool + 2 LRN + 3 fc + 2 dropout + softmax;
#   8 weighted layers with a bias each
# - GoogLeNet: 11 layers before the inceptions, 9 inceptions of 14 (6 conv, 6 ReLU, pool,
#   concat), 2 pools between, pool/dropout/fc/softmax at the end; a Split feeds each
#   inception's four branches; 57 conv + 1 fc, each weight and bias
# - VGG-16: input + 13 conv + 13 ReLU + 5 pool + 3 fc + 2 ReLU + 2 dropout + softmax
# - ResNet-50: 6 stem layers, 16 bottlenecks of 13 (3 x conv/BN/Scale, 2 ReLU, Eltwise, ReLU)
#   plus 3 for the 4 projection shortcuts, pool/fc/softmax; a Split per block input;
#   params: stem conv (w, b) 2 + BN 3 + Scale 2, 52 bias-free conv/BN/Scale triples of 6, fc 2
# - SqueezeNet 1.1: 4 stem layers, 8 fire modules of 7, 2 pools, dropout/conv10/ReLU/pool/
#   softmax; a Split per squeeze output; 26 convolutions with a bias
# - the V1 net: 12 layers + the Input layer made from its input fields; 4 weighted layers
COUNTS = {"caffenet": (24, 0, 16), "alexnet": (24, 0, 16),
          "googlenet": (11 + 9 * 14 + 2 + 4 + 9, 9, 2 * 58),
          "vgg16": (1 + 13 + 13 + 5 + 3 + 2 + 2 + 1, 0, 2 * 16),
          "resnet50": (6 + 16 * 13 + 4 * 3 + 3 + 16, 16, 2 + 3 + 2 + 52 * 6 + 2),
          "squeezenet1.1": (4 + 8 * 7 + 2 + 5 + 8, 8, 2 * 26), "v1_small": (13, 0, 8)}

# the blob compared before the final Softmax (its logits)
LOGITS = {"caffenet": "fc8", "alexnet": "fc8", "googlenet": "loss3/classifier", "vgg16": "fc8",
          "resnet50": "fc1000", "squeezenet1.1": "pool10", "v1_small": "ip2"}


@pytest.mark.parametrize("key", sorted(SHAPES))
def test_blob_shapes_as_caffe(key):
    net = caffe.Net(path(key), caffe.TEST)
    for name, shape in SHAPES[key].items():
        assert net.blobs[name].shape == shape, name
    assert net.inputs == ["data"] and net.outputs == ["prob"]
    splits = sum(layer.type == "Split" for layer in net.layers)
    assert (len(net.layers), splits, len(net.learnable_params)) == COUNTS[key]


def test_v1_file_is_upgraded_on_read():
    net = caffe.Net(path("v1_small"), caffe.TEST)
    assert [net.layers[i].type for i in range(4)] == ["Input", "Convolution", "ReLU", "Pooling"]
    assert net.params["conv1"][0].shape == (16, 3, 5, 5)
    assert net.params["conv2"][0].shape == (32, 8, 3, 3)  # group 2: 16 / 2 input channels


def fill_random(net, seed):
    """Random weights that keep activations of order one through deep nets: convolution and
    inner-product weights ~ N(0, 2 / fan_in) (He et al.), small random biases; BatchNorm gets
    a real mean, a positive variance and a scale factor of 1, Scale positive gammas."""
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        b = layer.blobs
        if not len(b):
            continue
        if layer.type == "BatchNorm":
            b[0].data[...] = rng.normal(0.0, 0.1, b[0].shape)
            b[1].data[...] = rng.uniform(0.5, 1.5, b[1].shape)
            b[2].data[...] = 1.0
        elif layer.type == "Scale":
            b[0].data[...] = rng.uniform(0.5, 1.0, b[0].shape)
            if len(b) > 1:
                b[1].data[...] = rng.normal(0.0, 0.1, b[1].shape)
        else:
            fan_in = b[0].count // b[0].shape[0]
            scale = np.float32(np.sqrt(2.0 / fan_in))
            b[0].data[...] = rng.standard_normal(b[0].shape, dtype=np.float32) * scale
            if len(b) > 1:
                b[1].data[...] = rng.normal(0.0, 0.05, b[1].shape)
    return rng


def close(ours, theirs, what):
    theirs = np.asarray(theirs).reshape(ours.shape)
    atol = RTOL * float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=atol, err_msg=what)


def filled(key):
    """A zoo net built as the zoo tests build it: fill_random's weights and the input drawn
    after them."""
    caffe.set_random_seed(11)
    net = caffe.Net(path(key), caffe.TEST)
    rng = fill_random(net, seed=sum(map(ord, key)))
    return net, rng.uniform(-1.0, 1.0, net.blobs["data"].shape).astype(np.float32)


def round_trip_and_compare(key, tmp_path, net, x):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    logits_name = LOGITS[key]
    prob = net.forward(data=x)["prob"].copy()
    logits = net.blobs[logits_name].data.copy()
    # the outputs mean something: logits spread out, probabilities far from uniform
    assert np.isfinite(logits).all() and logits.std() > 0.1
    assert prob.max() > 2.0 / prob.size
    np.testing.assert_allclose(prob.reshape(len(prob), -1).sum(axis=1), 1.0, rtol=1e-5)

    weights = tmp_path / ("%s.caffemodel" % key)
    net.save(str(weights))
    # unfolded, so that the round trip is checked bit for bit (folding, on by default for a
    # TEST net with weights, changes the rounding; tests/test_inference_fold.py checks it)
    fresh = caffe.Net(path(key), str(weights), caffe.TEST, fold=False)
    for name, blobs in net.params.items():
        for i, blob in enumerate(blobs):
            np.testing.assert_array_equal(fresh.params[name][i].data, blob.data,
                                          err_msg="%s param %d" % (name, i))
    np.testing.assert_array_equal(fresh.forward(data=x)["prob"], prob)

    cvnet = cv2.dnn.readNetFromCaffe(path(key), str(weights))
    cvnet.setInput(x)
    theirs_logits, theirs_prob = cvnet.forward([logits_name, "prob"])
    close(logits, theirs_logits, "%s: %s vs OpenCV" % (key, logits_name))
    close(prob, theirs_prob, "%s: prob vs OpenCV" % key)


def test_small_nets_round_trip_and_match_opencv(tmp_path):
    for key in ("v1_small", "squeezenet1.1"):
        round_trip_and_compare(key, tmp_path, *filled(key))


@pytest.mark.slow
@pytest.mark.parametrize("key", ["caffenet", "alexnet", "googlenet", "vgg16", "resnet50"])
def test_zoo_forward_round_trip_and_opencv(key, tmp_path, filled_zoo_net):
    round_trip_and_compare(key, tmp_path, *filled_zoo_net(key))


def test_a_shared_zoo_net_refuses_writes_to_its_weights(filled_zoo_net):
    """conftest's filled_zoo_net is shared by every module that runs the net: a test that
    wrote its weights would change the others' references, so a write raises; its input is
    each caller's own copy. The weights are fill_random's, as the tests built them before."""
    net, x = filled_zoo_net("squeezenet1.1")
    own, own_x = filled("squeezenet1.1")
    for name, blobs in net.params.items():
        for i, blob in enumerate(blobs):
            np.testing.assert_array_equal(blob.data, own.params[name][i].data)
            with pytest.raises(ValueError, match="read-only"):
                blob.data[...] = 0
            with pytest.raises(ValueError, match="read-only"):
                blob.data.reshape(-1)[0] = 1
    np.testing.assert_array_equal(x, own_x)
    x[...] = 0
    assert filled_zoo_net("squeezenet1.1")[1].any()
