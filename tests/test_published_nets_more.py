"""More published deploy nets, read unchanged from tests/fixtures/real (sources in its README):
ResNet-101 as its authors released it (KaimingHe/deep-residual-networks), the Places365 CNNs
(AlexNet, GoogLeNet, VGG-16), SqueezeNet 1.1, soeaver/caffe-model's Inception-v3, Inception-v4,
DenseNet-121, pre-activation ResNet-101, WRN-50-2 and ResNet-18, BVLC's fully convolutional
CaffeNet (examples/net_surgery) and its MNIST siamese feature net.

Each one loads as published; its blob shapes are those the paper or the repository states;
with seeded random weights written to a .caffemodel, every blob agrees with OpenCV's Caffe
importer (cv2.dnn.readNetFromCaffe, layer fusion off, each blob compared with the output of
the last layer writing it) to the model zoo's tolerance, and the file read back with those
weights (folded, the default for a TEST net with weights) gives the same outputs.
"""

import os

import numpy as np
import pytest
from test_model_zoo import close
from test_published_nets import every_blob_agrees_with_opencv, fill, inputs, last_writers

import pycaffe_lite as caffe

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def stages(blobs, shape):
    return {blob: shape for blob in blobs}


# file; the input shape the tests run (None: the file's own); shapes (batch axis left out) as
# the paper or the repository states them
NETS = {
    # Deep Residual Learning (He et al. 2016), Table 1, 101 layers: conv1 112 x 112 x 64,
    # 3 x 3 max pooling to 56, conv2_x 256 @ 56, conv3_x 512 @ 28 (4 blocks), conv4_x
    # 1024 @ 14 (23 blocks: res4a, res4b1 ... res4b22), conv5_x 2048 @ 7, average pooling, fc 1000
    "resnet101": dict(file="kaiming_resnet101_deploy.prototxt", shape=None,
                      shapes={"conv1": (64, 112, 112), "pool1": (64, 56, 56),
                              "res2c": (256, 56, 56), "res3b3": (512, 28, 28),
                              "res4b22": (1024, 14, 14), "res5c": (2048, 7, 7),
                              "pool5": (2048, 1, 1), "fc1000": (1000,), "prob": (1000,)}),
    # Places365 (Zhou et al. 2017): the ImageNet architectures with 365 scene classes;
    # AlexNet (Krizhevsky et al. 2012) 96 @ 55, 256 @ 27 (here 13 after pool2), 4096, 4096
    "places365_alexnet": dict(file="places365_alexnet_deploy.prototxt", shape=(2, 3, 227, 227),
                              shapes={"conv1": (96, 55, 55), "pool1": (96, 27, 27),
                                      "pool2": (256, 13, 13), "pool5": (256, 6, 6),
                                      "fc6": (4096,), "fc7": (4096,), "fc8": (365,),
                                      "prob": (365,)}),
    # GoogLeNet (Szegedy et al. 2015), Table 1: inception (3a) 256 @ 28, (3b) 480, (4a) 512 @ 14,
    # (4d) 528, (4e) 832, (5a) 832 @ 7, (5b) 1024, average pooling to 1 x 1
    "places365_googlenet": dict(file="places365_googlenet_deploy.prototxt",
                                shape=(1, 3, 224, 224),
                                shapes={"inception_3a/output": (256, 28, 28),
                                        "inception_3b/output": (480, 28, 28),
                                        "inception_4a/output": (512, 14, 14),
                                        "inception_4d/output": (528, 14, 14),
                                        "inception_4e/output": (832, 14, 14),
                                        "inception_5a/output": (832, 7, 7),
                                        "inception_5b/output": (1024, 7, 7),
                                        "pool5/7x7_s1": (1024, 1, 1),
                                        "loss3/classifier": (365,)}),
    # VGG-16 (Simonyan and Zisserman 2015), configuration D: 64 @ 224 ... 512 @ 14, pooled to
    # 7 x 7, fc 4096, 4096
    "places365_vgg16": dict(file="places365_vgg16_deploy.prototxt", shape=(1, 3, 224, 224),
                            shapes={"pool1": (64, 112, 112), "pool2": (128, 56, 56),
                                    "pool3": (256, 28, 28), "pool4": (512, 14, 14),
                                    "pool5": (512, 7, 7), "fc6": (4096,), "fc7": (4096,),
                                    "fc8a": (365,)}),
    # SqueezeNet v1.1 (its README): conv1 64 filters of 3 x 3, stride 2 (113 @ 227), pooling
    # after conv1, fire3 and fire5; fire2-3 128, fire4-5 256, fire6-7 384, fire8-9 512
    "squeezenet_v1.1": dict(file="squeezenet_v1.1_deploy.prototxt", shape=(2, 3, 227, 227),
                            shapes={"conv1": (64, 113, 113), "pool1": (64, 56, 56),
                                    "fire3/concat": (128, 56, 56), "pool3": (128, 28, 28),
                                    "fire5/concat": (256, 28, 28), "pool5": (256, 14, 14),
                                    "fire9/concat": (512, 14, 14), "conv10": (1000, 14, 14),
                                    "pool10": (1000, 1, 1)}),
    # Inception-v3 (Szegedy et al. 2016) as its reference implementation builds it (the
    # Mixed blocks of TF-slim's inception_v3): 32 @ 149, 35 x 35 x 256, 288, 288, then
    # 17 x 17 x 768 (five blocks), 8 x 8 x 1280, 2048, 2048, average pooling to 2048
    "inception_v3": dict(file="soeaver_inception-v3.prototxt", shape=None,
                         shapes={"conv1_3x3_s2": (32, 149, 149),
                                 "inception_a1_output": (256, 35, 35),
                                 "inception_a3_output": (288, 35, 35),
                                 "reduction_a_concat": (768, 17, 17),
                                 "inception_b4_concat": (768, 17, 17),
                                 "reduction_b_concat": (1280, 8, 8),
                                 "inception_c2_concat": (2048, 8, 8),
                                 "pool_8x8_s1": (2048, 1, 1), "classifier": (1000,)}),
    # Inception-v4 (Szegedy et al. 2017), Figures 3-9: the stem gives 35 x 35 x 384,
    # 4 x Inception-A 384 @ 35, Reduction-A 1024 @ 17, 7 x Inception-B 1024 @ 17, Reduction-B
    # 1536 @ 8, 3 x Inception-C 1536 @ 8, average pooling to 1536
    "inception_v4": dict(file="soeaver_inception-v4.prototxt", shape=None,
                         shapes={"conv1_3x3_s2": (32, 149, 149),
                                 "inception_a1_concat": (384, 35, 35),
                                 "inception_a4_concat": (384, 35, 35),
                                 "reduction_a_concat": (1024, 17, 17),
                                 "inception_b7_concat": (1024, 17, 17),
                                 "reduction_b_concat": (1536, 8, 8),
                                 "inception_c3_concat": (1536, 8, 8),
                                 "pool_8x8_s1": (1536, 1, 1), "classifier": (1000,)}),
    # DenseNet-121 (Huang et al. 2017), Table 1, growth rate 32: pooling to 56, dense block 1
    # (6 layers) 64 + 6 x 32 = 256 @ 56, transitions halve the channels and the size; block 2
    # (12) 128 + 384 = 512 @ 28, block 3 (24) 256 + 768 = 1024 @ 14, block 4 (16)
    # 512 + 512 = 1024 @ 7
    "densenet121": dict(file="soeaver_densenet121.prototxt", shape=None,
                        shapes={"pool1": (64, 56, 56), "dense6_concat": (256, 56, 56),
                                "pool2": (128, 28, 28), "dense18_concat": (512, 28, 28),
                                "pool3": (256, 14, 14), "dense42_concat": (1024, 14, 14),
                                "pool4": (512, 7, 7), "dense58_concat": (1024, 7, 7),
                                "pool5": (1024, 1, 1), "classifier_reshape": (1000,)}),
    # Identity Mappings in Deep Residual Networks (He et al. 2016): the pre-activation
    # ResNet-101 keeps Table 1's stages: 256 @ 56 (3 units), 512 @ 28 (4), 1024 @ 14 (23),
    # 2048 @ 7 (3)
    "resnet101_v2": dict(file="soeaver_resnet101-v2.prototxt", shape=None,
                         shapes={"conv1": (64, 112, 112), "pool1": (64, 56, 56),
                                 "res3_eletwise": (256, 56, 56),
                                 "res7_eletwise": (512, 28, 28),
                                 "res30_eletwise": (1024, 14, 14),
                                 "res33_eletwise": (2048, 7, 7), "pool5": (2048, 1, 1),
                                 "classifier": (1000,)}),
    # Wide Residual Networks (Zagoruyko and Komodakis 2016): WRN-50-2 is ResNet-50 with the
    # bottleneck's inner width doubled (128, 256, 512, 1024), the outputs as ResNet-50's
    "wrn50_2": dict(file="soeaver_wrn50-2.prototxt", shape=None,
                    shapes={"res1_conv1": (128, 56, 56), "res3_elewise": (256, 56, 56),
                            "res4_conv1": (256, 56, 56), "res7_elewise": (512, 28, 28),
                            "res8_conv1": (512, 28, 28), "res13_elewise": (1024, 14, 14),
                            "res14_conv1": (1024, 14, 14), "res16_elewise": (2048, 7, 7),
                            "pool_ave": (2048, 1, 1), "classifier": (1000,)}),
    # ResNet-18 (He et al. 2016, Table 1): two basic blocks a stage, 64 @ 56, 128 @ 28,
    # 256 @ 14, 512 @ 7 (this file's stem is three 3 x 3 convolutions, the first of 32)
    "resnet18": dict(file="soeaver_resnet18-1x64d.prototxt", shape=None,
                     shapes={"res2": (64, 56, 56), "res4": (128, 28, 28), "res6": (256, 14, 14),
                             "res8": (512, 7, 7), "pool_avg": (512, 1, 1),
                             "classifier": (1000,)}),
    # BVLC's examples/net_surgery: CaffeNet with fc6-8 cast as convolutions; on its 451 x 451
    # input the notebook's classification map is 8 x 8 (pool5 13 x 13, a 6 x 6 fc6-conv)
    "caffenet_full_conv": dict(file="bvlc_caffenet_full_conv.prototxt", shape=None,
                               shapes={"conv1": (96, 111, 111), "pool1": (96, 55, 55),
                                       "pool2": (256, 27, 27), "pool5": (256, 13, 13),
                                       "fc6-conv": (4096, 8, 8), "fc8-conv": (1000, 8, 8),
                                       "prob": (1000, 8, 8)}),
    # BVLC's examples/siamese: LeNet's layers mapping a digit to a 2-D feature (its readme)
    "mnist_siamese": dict(file="bvlc_mnist_siamese.prototxt", shape=(4, 1, 28, 28),
                          shapes={"pool1": (20, 12, 12), "pool2": (50, 4, 4), "ip1": (500,),
                                  "ip2": (10,), "feat": (2,)}),
}
# nets whose tests take over ~2 s on a shared two-core machine
SLOW = {"resnet101", "places365_vgg16", "places365_alexnet", "inception_v4", "wrn50_2",
        "resnet101_v2", "densenet121", "inception_v3", "caffenet_full_conv"}


def params(keys, slow=SLOW):
    return [pytest.param(k, marks=pytest.mark.slow) if k in slow else k for k in keys]


def path(key):
    return os.path.join(REAL, NETS[key]["file"])


def build(key, weights=None):
    net = caffe.Net(path(key), weights, caffe.TEST) if weights else \
        caffe.Net(path(key), caffe.TEST)
    shape = NETS[key]["shape"]
    if shape is not None:
        net.blobs[net.inputs[0]].reshape(*shape)
        net.reshape()
    return net


# VGG-16's 138 M parameters take seconds to allocate
@pytest.mark.parametrize("key", params(sorted(NETS), {"places365_vgg16"}))
def test_published_file_loads_with_the_stated_shapes(key):
    net = build(key)
    for blob, shape in NETS[key]["shapes"].items():
        assert net.blobs[blob].shape[1:] == shape, (key, blob)


def logits_of(net):
    """The bottom of the last Softmax (the net's output where it has none)."""
    for name, layer in reversed(list(zip(net._layer_names, net.layers))):
        if layer.type == "Softmax":
            return net.bottom_names[name][0]
    return net.outputs[0]


@pytest.mark.parametrize("key", params(sorted(NETS)))
def test_every_layer_agrees_with_opencv(key, tmp_path):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    caffe.set_random_seed(5)
    net = build(key)
    rng = fill(net, seed=sum(map(ord, key)))
    feeds = inputs(net, rng)
    net.forward(**feeds)
    # deep nets with random weights spread their logits so far that the Softmax saturates:
    # the layer writing them is scaled to a spread of about 2
    logits = net.blobs[logits_of(net)].data
    writer = last_writers(net)[logits_of(net)][0]
    for blob in net.params.get(writer, []):
        blob.data[...] *= np.float32(2.0 / max(float(logits.std()), 1e-6))
    outputs = {k: v.copy() for k, v in net.forward(**feeds).items()}
    assert np.isfinite(logits).all() and logits.std() > 0.05, "%s: logits spread" % key
    for name, layer in zip(net._layer_names, net.layers):
        if layer.type == "Softmax":  # probabilities not saturated to 0 / 1
            assert net.blobs[net.top_names[name][0]].data.max() < 0.999, (key, name)

    weights = tmp_path / ("%s.caffemodel" % key)
    net.save(str(weights))
    every_blob_agrees_with_opencv(cv2, key, net, feeds, path(key), weights)

    folded = build(key, str(weights))
    for name, value in folded.forward(**feeds).items():
        close(value, outputs[name], "%s: %s folded vs unfolded" % (key, name))
