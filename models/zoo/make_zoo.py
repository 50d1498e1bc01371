"""Regenerates the deploy prototxts of this folder (except the hand-written V1 net).

Run ``python models/zoo/make_zoo.py`` from the repository root. The nets are written with
:mod:`pycaffe_lite.net_spec`, following the published architectures' layer names, shapes and
parameters: CaffeNet, AlexNet, GoogLeNet, VGG-16, ResNet-50, SqueezeNet 1.1 and MobileNet v1,
each for a batch of one image.
"""

import os

from pycaffe_lite.net_spec import NetSpec
from pycaffe_lite.net_spec import layers as L
from pycaffe_lite.net_spec import params as P

HERE = os.path.dirname(os.path.abspath(__file__))


def data_input(n, size):
    n.data = L.Input(shape=dict(dim=[1, 3, size, size]))
    return n.data


def conv(bottom, num_output, kernel, stride=1, pad=0, group=1, bias=True):
    args = dict(num_output=num_output, kernel_size=kernel)
    if stride != 1:
        args["stride"] = stride
    if pad:
        args["pad"] = pad
    if group != 1:
        args["group"] = group
    if not bias:
        args["bias_term"] = False
    return L.Convolution(bottom, **args)


def relu(bottom):
    return L.ReLU(bottom, in_place=True)


def max_pool(bottom, kernel, stride, pad=0):
    args = dict(pool=P.Pooling.MAX, kernel_size=kernel, stride=stride)
    if pad:
        args["pad"] = pad
    return L.Pooling(bottom, **args)


def lrn(bottom):
    return L.LRN(bottom, local_size=5, alpha=1e-4, beta=0.75)


def classifier_head(n, bottom, fc_names=("fc6", "fc7", "fc8")):
    a, b, c = fc_names
    n[a] = L.InnerProduct(bottom, num_output=4096)
    n["relu" + a[2:]] = relu(n[a])
    n["drop" + a[2:]] = L.Dropout(n[a], dropout_ratio=0.5, in_place=True)
    n[b] = L.InnerProduct(n[a], num_output=4096)
    n["relu" + b[2:]] = relu(n[b])
    n["drop" + b[2:]] = L.Dropout(n[b], dropout_ratio=0.5, in_place=True)
    n[c] = L.InnerProduct(n[b], num_output=1000)
    n.prob = L.Softmax(n[c])


def caffenet(alexnet=False):
    n = NetSpec()
    data_input(n, 227)
    n.conv1 = conv(n.data, 96, 11, stride=4)
    n.relu1 = relu(n.conv1)
    if alexnet:  # AlexNet normalizes before pooling, CaffeNet after
        n.norm1 = lrn(n.conv1)
        n.pool1 = max_pool(n.norm1, 3, 2)
        n.conv2 = conv(n.pool1, 256, 5, pad=2, group=2)
        n.relu2 = relu(n.conv2)
        n.norm2 = lrn(n.conv2)
        n.pool2 = max_pool(n.norm2, 3, 2)
        last = n.pool2
    else:
        n.pool1 = max_pool(n.conv1, 3, 2)
        n.norm1 = lrn(n.pool1)
        n.conv2 = conv(n.norm1, 256, 5, pad=2, group=2)
        n.relu2 = relu(n.conv2)
        n.pool2 = max_pool(n.conv2, 3, 2)
        n.norm2 = lrn(n.pool2)
        last = n.norm2
    n.conv3 = conv(last, 384, 3, pad=1)
    n.relu3 = relu(n.conv3)
    n.conv4 = conv(n.conv3, 384, 3, pad=1, group=2)
    n.relu4 = relu(n.conv4)
    n.conv5 = conv(n.conv4, 256, 3, pad=1, group=2)
    n.relu5 = relu(n.conv5)
    n.pool5 = max_pool(n.conv5, 3, 2)
    classifier_head(n, n.pool5)
    return n, "AlexNet" if alexnet else "CaffeNet"


def inception(n, bottom, name, c1, c3r, c3, c5r, c5, pp):
    p = name + "/"
    n[p + "1x1"] = conv(bottom, c1, 1)
    n[p + "relu_1x1"] = relu(n[p + "1x1"])
    n[p + "3x3_reduce"] = conv(bottom, c3r, 1)
    n[p + "relu_3x3_reduce"] = relu(n[p + "3x3_reduce"])
    n[p + "3x3"] = conv(n[p + "3x3_reduce"], c3, 3, pad=1)
    n[p + "relu_3x3"] = relu(n[p + "3x3"])
    n[p + "5x5_reduce"] = conv(bottom, c5r, 1)
    n[p + "relu_5x5_reduce"] = relu(n[p + "5x5_reduce"])
    n[p + "5x5"] = conv(n[p + "5x5_reduce"], c5, 5, pad=2)
    n[p + "relu_5x5"] = relu(n[p + "5x5"])
    n[p + "pool"] = max_pool(bottom, 3, 1, pad=1)
    n[p + "pool_proj"] = conv(n[p + "pool"], pp, 1)
    n[p + "relu_pool_proj"] = relu(n[p + "pool_proj"])
    n[p + "output"] = L.Concat(n[p + "1x1"], n[p + "3x3"], n[p + "5x5"], n[p + "pool_proj"])
    return n[p + "output"]


def googlenet():
    n = NetSpec()
    data_input(n, 224)
    n["conv1/7x7_s2"] = conv(n.data, 64, 7, stride=2, pad=3)
    n["conv1/relu_7x7"] = relu(n["conv1/7x7_s2"])
    n["pool1/3x3_s2"] = max_pool(n["conv1/7x7_s2"], 3, 2)
    n["pool1/norm1"] = lrn(n["pool1/3x3_s2"])
    n["conv2/3x3_reduce"] = conv(n["pool1/norm1"], 64, 1)
    n["conv2/relu_3x3_reduce"] = relu(n["conv2/3x3_reduce"])
    n["conv2/3x3"] = conv(n["conv2/3x3_reduce"], 192, 3, pad=1)
    n["conv2/relu_3x3"] = relu(n["conv2/3x3"])
    n["conv2/norm2"] = lrn(n["conv2/3x3"])
    n["pool2/3x3_s2"] = max_pool(n["conv2/norm2"], 3, 2)
    x = inception(n, n["pool2/3x3_s2"], "inception_3a", 64, 96, 128, 16, 32, 32)
    x = inception(n, x, "inception_3b", 128, 128, 192, 32, 96, 64)
    n["pool3/3x3_s2"] = max_pool(x, 3, 2)
    x = inception(n, n["pool3/3x3_s2"], "inception_4a", 192, 96, 208, 16, 48, 64)
    x = inception(n, x, "inception_4b", 160, 112, 224, 24, 64, 64)
    x = inception(n, x, "inception_4c", 128, 128, 256, 24, 64, 64)
    x = inception(n, x, "inception_4d", 112, 144, 288, 32, 64, 64)
    x = inception(n, x, "inception_4e", 256, 160, 320, 32, 128, 128)
    n["pool4/3x3_s2"] = max_pool(x, 3, 2)
    x = inception(n, n["pool4/3x3_s2"], "inception_5a", 256, 160, 320, 32, 128, 128)
    x = inception(n, x, "inception_5b", 384, 192, 384, 48, 128, 128)
    n["pool5/7x7_s1"] = L.Pooling(x, pool=P.Pooling.AVE, kernel_size=7, stride=1)
    n["pool5/drop_7x7_s1"] = L.Dropout(n["pool5/7x7_s1"], dropout_ratio=0.4, in_place=True)
    n["loss3/classifier"] = L.InnerProduct(n["pool5/7x7_s1"], num_output=1000)
    n.prob = L.Softmax(n["loss3/classifier"])
    return n, "GoogleNet"


def vgg16():
    n = NetSpec()
    x = data_input(n, 224)
    for stage, (width, depth) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)],
                                           start=1):
        for i in range(1, depth + 1):
            name = "conv%d_%d" % (stage, i)
            n[name] = conv(x, width, 3, pad=1)
            n["relu%d_%d" % (stage, i)] = relu(n[name])
            x = n[name]
        n["pool%d" % stage] = max_pool(x, 2, 2)
        x = n["pool%d" % stage]
    classifier_head(n, x)
    return n, "VGG_ILSVRC_16_layers"


def conv_bn(n, bottom, name, suffix, num_output, kernel, stride=1, pad=0, with_relu=True):
    n[name] = conv(bottom, num_output, kernel, stride=stride, pad=pad, bias=False)
    n["bn" + suffix] = L.BatchNorm(n[name], use_global_stats=True, in_place=True)
    n["scale" + suffix] = L.Scale(n[name], bias_term=True, in_place=True)
    if with_relu:
        n[name + "_relu"] = relu(n[name])
    return n[name]


def bottleneck(n, bottom, stage, block, width, stride, project):
    tag = "%d%s" % (stage, block)
    if project:
        shortcut = conv_bn(n, bottom, "res%s_branch1" % tag, "%s_branch1" % tag, 4 * width, 1,
                           stride=stride, with_relu=False)
    else:
        shortcut = bottom
    x = conv_bn(n, bottom, "res%s_branch2a" % tag, "%s_branch2a" % tag, width, 1, stride=stride)
    x = conv_bn(n, x, "res%s_branch2b" % tag, "%s_branch2b" % tag, width, 3, pad=1)
    x = conv_bn(n, x, "res%s_branch2c" % tag, "%s_branch2c" % tag, 4 * width, 1,
                with_relu=False)
    n["res" + tag] = L.Eltwise(shortcut, x)
    n["res%s_relu" % tag] = relu(n["res" + tag])
    return n["res" + tag]


def resnet50():
    n = NetSpec()
    data_input(n, 224)
    n.conv1 = conv(n.data, 64, 7, stride=2, pad=3, bias=True)
    n.bn_conv1 = L.BatchNorm(n.conv1, use_global_stats=True, in_place=True)
    n.scale_conv1 = L.Scale(n.conv1, bias_term=True, in_place=True)
    n.conv1_relu = relu(n.conv1)
    n.pool1 = max_pool(n.conv1, 3, 2)
    x = n.pool1
    for stage, width, blocks in [(2, 64, 3), (3, 128, 4), (4, 256, 6), (5, 512, 3)]:
        for i in range(blocks):
            stride = 2 if (i == 0 and stage > 2) else 1
            x = bottleneck(n, x, stage, "abcdef"[i], width, stride, project=(i == 0))
    n.pool5 = L.Pooling(x, pool=P.Pooling.AVE, kernel_size=7, stride=1)
    n.fc1000 = L.InnerProduct(n.pool5, num_output=1000)
    n.prob = L.Softmax(n.fc1000)
    return n, "ResNet-50"


def fire(n, bottom, name, squeeze, expand):
    p = name + "/"
    n[p + "squeeze1x1"] = conv(bottom, squeeze, 1)
    n[p + "relu_squeeze1x1"] = relu(n[p + "squeeze1x1"])
    n[p + "expand1x1"] = conv(n[p + "squeeze1x1"], expand, 1)
    n[p + "relu_expand1x1"] = relu(n[p + "expand1x1"])
    n[p + "expand3x3"] = conv(n[p + "squeeze1x1"], expand, 3, pad=1)
    n[p + "relu_expand3x3"] = relu(n[p + "expand3x3"])
    n[p + "concat"] = L.Concat(n[p + "expand1x1"], n[p + "expand3x3"])
    return n[p + "concat"]


def squeezenet11():
    n = NetSpec()
    data_input(n, 227)
    n.conv1 = conv(n.data, 64, 3, stride=2)
    n.relu_conv1 = relu(n.conv1)
    n.pool1 = max_pool(n.conv1, 3, 2)
    x = fire(n, n.pool1, "fire2", 16, 64)
    x = fire(n, x, "fire3", 16, 64)
    n.pool3 = max_pool(x, 3, 2)
    x = fire(n, n.pool3, "fire4", 32, 128)
    x = fire(n, x, "fire5", 32, 128)
    n.pool5 = max_pool(x, 3, 2)
    x = fire(n, n.pool5, "fire6", 48, 192)
    x = fire(n, x, "fire7", 48, 192)
    x = fire(n, x, "fire8", 64, 256)
    x = fire(n, x, "fire9", 64, 256)
    n.drop9 = L.Dropout(x, dropout_ratio=0.5, in_place=True)
    n.conv10 = conv(x, 1000, 1)
    n.relu_conv10 = relu(n.conv10)
    n.pool10 = L.Pooling(n.conv10, pool=P.Pooling.AVE, global_pooling=True)
    n.prob = L.Softmax(n.pool10)
    return n, "SqueezeNet_v1.1"


def mobilenet_unit(n, bottom, name, num_output, kernel, stride=1, pad=0, group=1,
                   relu_name=None):
    """Convolution (no bias) + BatchNorm + Scale + ReLU, named as in the published MobileNet
    v1 Caffe deploy (``conv2_1/dw``, ``conv2_1/dw/bn``, ``conv2_1/dw/scale``, ``relu2_1/dw``)."""
    n[name] = conv(bottom, num_output, kernel, stride=stride, pad=pad, group=group, bias=False)
    n[name + "/bn"] = L.BatchNorm(n[name], use_global_stats=True, in_place=True)
    n[name + "/scale"] = L.Scale(n[name], bias_term=True, in_place=True)
    n[relu_name] = relu(n[name])
    return n[name]


def mobilenet():
    """MobileNet v1 (width 1.0, 224x224): depthwise convolutions as Convolution with group."""
    n = NetSpec()
    data_input(n, 224)
    x = mobilenet_unit(n, n.data, "conv1", 32, 3, stride=2, pad=1, relu_name="relu1")
    channels = 32
    plan = [("2_1", 64, 1), ("2_2", 128, 2), ("3_1", 128, 1), ("3_2", 256, 2), ("4_1", 256, 1),
            ("4_2", 512, 2), ("5_1", 512, 1), ("5_2", 512, 1), ("5_3", 512, 1), ("5_4", 512, 1),
            ("5_5", 512, 1), ("5_6", 1024, 2), ("6", 1024, 1)]
    for tag, width, stride in plan:
        x = mobilenet_unit(n, x, "conv%s/dw" % tag, channels, 3, stride=stride, pad=1,
                           group=channels, relu_name="relu%s/dw" % tag)
        x = mobilenet_unit(n, x, "conv%s/sep" % tag, width, 1, relu_name="relu%s/sep" % tag)
        channels = width
    n.pool6 = L.Pooling(x, pool=P.Pooling.AVE, global_pooling=True)
    n.fc7 = conv(n.pool6, 1000, 1)
    n.prob = L.Softmax(n.fc7)
    return n, "MOBILENET"


NETS = {
    "caffenet": lambda: caffenet(alexnet=False),
    "alexnet": lambda: caffenet(alexnet=True),
    "googlenet": googlenet,
    "vgg16": vgg16,
    "resnet50": resnet50,
    "squeezenet1.1": squeezenet11,
    "mobilenet": mobilenet,
}


def main():
    for key, build in NETS.items():
        spec, name = build()
        param = spec.to_proto()
        param.name = name
        path = os.path.join(HERE, "%s_deploy.prototxt" % key)
        with open(path, "w") as f:
            f.write("# %s deploy net (batch of one), generated by make_zoo.py\n" % name)
            f.write(str(param))
        print("wrote", path)


if __name__ == "__main__":
    main()
