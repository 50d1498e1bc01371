"""Darknet sections that move values across positions: AlexeyAB's ``[reorg3d]`` and
pjreddie's ``[shortcut]`` between layers of different height and width. References: NumPy
ports of Darknet's index arithmetic (``reorg_cpu`` and ``shortcut_cpu`` in blas.c)."""

import numpy as np
import pytest

import pycaffe_lite
from pycaffe_lite.darknet import DarknetError, convert
from pycaffe_lite.proto import protoio


def _run(tmp_path, cfg_text, seed=0):
    """The structure-only conversion of ``cfg_text`` as a Net, after a forward pass on a
    random input."""
    result = convert(cfg_text)
    path = str(tmp_path / "m.prototxt")
    protoio.write_text(result.net_param, path)
    net = pycaffe_lite.Net(path, pycaffe_lite.TEST)
    net.blobs["data"].data[...] = np.random.default_rng(seed).normal(
        size=net.blobs["data"].data.shape)
    net.forward()
    return result, net


def reorg_cpu(x, out_w, out_h, out_c, batch, stride, forward):
    """AlexeyAB's ``reorg_cpu(x, out_w, out_h, out_c, batch, stride, forward, out)``
    (blas.c), its loops over flat arrays."""
    x = np.asarray(x, np.float64).ravel()
    out = np.full_like(x, np.nan)
    in_c = out_c // (stride * stride)
    for b in range(batch):
        for k in range(out_c):
            for j in range(out_h):
                for i in range(out_w):
                    in_index = i + out_w * (j + out_h * (k + out_c * b))
                    c2 = k % in_c
                    offset = k // in_c
                    w2 = i * stride + offset % stride
                    h2 = j * stride + offset // stride
                    out_index = w2 + out_w * stride * (h2 + out_h * stride * (c2 + in_c * b))
                    if forward:
                        out[out_index] = x[in_index]
                    else:
                        out[in_index] = x[out_index]
    return out


REORG3D = "[net]\nwidth=%d\nheight=%d\nchannels=%d\n\n[reorg3d]\nstride=%d\n%s"


@pytest.mark.parametrize("c, h, w, s", [(3, 4, 6, 2), (2, 6, 3, 3), (2, 2, 2, 1)])
def test_reorg3d_is_darknets_space_to_depth(tmp_path, c, h, w, s):
    """AlexeyAB's yolov4-sam-mish-csp-reorg-bfm.cfg (line 865) has ``[reorg3d] stride=2``,
    which the conversion refused; it is now Reshape, Permute, Reshape in the element order of
    forward_reorg_layer (reorg_cpu with the output's sizes and forward=0)."""
    result, net = _run(tmp_path, REORG3D % (w, h, c, s, ""))
    x = net.blobs["data"].data
    got = net.blobs[result.blob_of_layer[0]].data
    assert got.shape == (1, c * s * s, h // s, w // s)
    expected = reorg_cpu(x, w // s, h // s, c * s * s, 1, s, 0)
    np.testing.assert_array_equal(got.ravel(), expected)


def test_reverse_reorg3d(tmp_path):
    """``reverse=1``: reorg_cpu with the output's sizes and forward=1 (channels must divide
    by stride^4, else Darknet leaves parts of its output unwritten: an error naming the
    line)."""
    result, net = _run(tmp_path, REORG3D % (3, 2, 32, 2, "reverse=1\n"))
    x = net.blobs["data"].data
    got = net.blobs[result.blob_of_layer[0]].data
    assert got.shape == (1, 8, 4, 6)
    np.testing.assert_array_equal(got.ravel(), reorg_cpu(x, 6, 4, 8, 1, 2, 1))
    with pytest.raises(DarknetError, match=r"<string>:8: layer 0 \[reorg3d\]: reverse=1 with "
                                           r"stride=2 needs channels divisible by 16"):
        convert(REORG3D % (3, 2, 8, 2, "reverse=1\n"))
    with pytest.raises(DarknetError, match=r"<string>:7: layer 0 \[reorg3d\]: the input, "
                                           r"2x3x4, does not divide by stride=2"):
        convert(REORG3D % (4, 3, 2, 2, ""))


def shortcut_cpu_pjreddie(w1, h1, c1, add, w2, h2, c2, s1, s2, out):
    """pjreddie's ``shortcut_cpu`` (blas.c) for one image, as forward_shortcut_layer calls it
    (``add``: the from layer's output, ``out``: a copy of the previous layer's)."""
    add, out = np.asarray(add, np.float64).ravel(), np.array(out, np.float64).ravel()
    stride, sample = max(w1 // w2, 1), max(w2 // w1, 1)
    for k in range(min(c1, c2)):
        for j in range(min(h1, h2)):
            for i in range(min(w1, w2)):
                out_index = i * sample + w2 * (j * sample + h2 * k)
                add_index = i * stride + w1 * (j * stride + h1 * k)
                out[out_index] = s1 * out[out_index] + s2 * add[add_index]
    return out


def shortcut_multilayer_cpu_alexeyab(add, inp):
    """AlexeyAB's ``shortcut_multilayer_cpu`` (blas.c) for one image and one from layer
    without weights: ``out[i] = in[i] + add[i]`` for ``i`` below the from layer's size."""
    add, out = np.asarray(add, np.float64).ravel(), np.array(inp, np.float64).ravel()
    n = min(add.size, out.size)
    out[:n] += add[:n]
    return out


SHORTCUT_DOWN = ("[net]\nwidth=4\nheight=6\nchannels=2\n\n"
                 "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n\n"
                 "[convolutional]\nfilters=5\nsize=1\nstride=2\nactivation=linear\n\n"
                 "[shortcut]\nfrom=-2\nactivation=linear\n")                 # lines 17, 18


def test_shortcut_across_sizes_names_both_forks_rules():
    """pjreddie's resnet50.cfg (line 152: layer 13 gives 256x64x64, the previous layer
    512x32x32) and the resnet101/152 and resnext cfgs add across a stride-2 stage. The two
    Darknets compute different sums there (pjreddie's shortcut_cpu samples the larger output
    with a step; AlexeyAB's parser asserts equal sizes and, built without asserts, its
    shortcut_multilayer_cpu adds the memory flat), and the same cfgs ship with both, so the
    refusal stays. It said only 'a shortcut between different shapes cannot be converted';
    it now names the file and line and what each fork computes, with pjreddie's step,
    range and channels."""
    rng = np.random.default_rng(3)
    src, prev = rng.normal(size=(3, 6, 4)), rng.normal(size=(5, 3, 2))
    pj = shortcut_cpu_pjreddie(4, 6, 3, src, 2, 3, 5, 1.0, 1.0, prev).reshape(5, 3, 2)
    ab = shortcut_multilayer_cpu_alexeyab(src, prev).reshape(5, 3, 2)
    assert not np.allclose(pj, ab)
    sampled = prev.copy()
    sampled[:3] += src[:, ::2, ::2]
    np.testing.assert_array_equal(pj, sampled)
    with pytest.raises(DarknetError, match=(
            r"<string>:18: layer 2 \[shortcut\]: layer 0 gives 3x6x4 but the previous layer "
            r"gives 5x3x2; a shortcut between different heights or widths is not converted: "
            r"pjreddie's Darknet adds layer 0 at \(2 y, 2 x\) to the previous layer at "
            r"\(1 y, 1 x\), for y < 3, x < 2 and the first 3 channels \(shortcut_cpu\), "
            r"while AlexeyAB's fork stops on an assertion \(or, built without asserts, adds "
            r"the two outputs' memory flat")):
        convert(SHORTCUT_DOWN)
    with pytest.raises(DarknetError, match=r"pjreddie's Darknet stops on an assertion too"):
        convert(SHORTCUT_DOWN.replace("height=6", "height=3"))
