"""benchmarks/profile_gpu_convs.py: the distinct convolutions it profiles are the net's.

ResNet-50's convolutions are derived here from its architecture (He et al., MSRA's Caffe
model): a 7x7/2 stem, then stages of 3, 4, 6 and 3 bottleneck blocks (1x1, 3x3, 1x1 with 4x
expansion) of widths 64, 128, 256 and 512, the first block of each stage with a 1x1
projection, the stride 2 of stages 3 to 5 on the first block's first 1x1 and projection.
The timing needs a GPU; the listing runs everywhere.
"""

import collections
import os
import sys

import pytest

import pycaffe_lite as caffe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
profile = pytest.importorskip("profile_gpu_convs")


def resnet50_convolutions(batch):
    """Counter of (x shape, w shape, stride, pad) over ResNet-50's convolutions."""
    out = collections.Counter()
    out[((batch, 3, 224, 224), (64, 3, 7, 7), 2, 3)] += 1
    channels, side = 64, 56  # after the stem and its 3x3/2 max pooling
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            inner = side // stride
            if block == 0:
                out[((batch, channels, side, side), (4 * width, channels, 1, 1), stride, 0)] += 1
            out[((batch, channels, side, side), (width, channels, 1, 1), stride, 0)] += 1
            out[((batch, width, inner, inner), (width, width, 3, 3), 1, 1)] += 1
            out[((batch, width, inner, inner), (4 * width, width, 1, 1), 1, 0)] += 1
            channels, side = 4 * width, inner
    return out


def test_the_distinct_convolutions_of_resnet50():
    net = caffe.Net(profile.cpu_bench.zoo_param("resnet50", 2, False, False, None),
                    caffe.TEST)
    configs = profile.conv_configs(net)
    # the classifier, an InnerProduct of 2048 inputs: a 1x1 convolution on the GPU
    fc = [c for c in configs if c["type"] == "InnerProduct"]
    assert [(c["x"], c["w"], c["y"], len(c["layers"])) for c in fc] == \
        [((2, 2048, 1, 1), (1000, 2048, 1, 1), (2, 1000, 1, 1), 1)]
    configs = [c for c in configs if c["type"] == "Convolution"]
    got = collections.Counter()
    for c in configs:
        assert c["dilation"] == (1, 1) and c["group"] == 1
        assert c["stride"][0] == c["stride"][1] and c["pad"][0] == c["pad"][1]
        got[(c["x"], c["w"], c["stride"][0], c["pad"][0])] += len(c["layers"])
        n, k, h, w = c["y"]
        assert (n, k) == (c["x"][0], c["w"][0])
        assert h == (c["x"][2] + 2 * c["pad"][0] - c["w"][2]) // c["stride"][0] + 1 == w
    want = resnet50_convolutions(2)
    assert got == want
    assert sum(want.values()) == 53 and len(want) == len(configs) == 20
    # every layer listed once, in the net's order
    names = [name for c in configs for name in c["layers"]]
    order = [rec.name for rec in net.records if rec.layer.type == "Convolution"]
    assert sorted(names) == sorted(order) and len(names) == len(set(names))
    assert configs[0]["layers"] == [order[0]]


def test_without_a_gpu_it_lists_them_and_exits_0(capsys, monkeypatch):
    monkeypatch.setattr(profile.backend, "gpu_available", lambda: False)
    assert profile.main(["--net", "resnet50", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "resnet50 batch 1: 53 convolutions, 20 distinct; 1 InnerProduct layers" in out
    assert "7x7/2 3->64" in out and "fc 1 x 2048->1000" in out and "no GPU: skipped" in out
