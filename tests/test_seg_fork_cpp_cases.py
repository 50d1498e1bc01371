"""The segmentation forks' own C++ test cases, with their input and expected values as data:
SegNet's and ENet's test_upsample_layer.cpp and test_dense_image_data_layer.cpp
(alexgkendall/caffe-segnet, TimoSaemann/caffe-enet), PSPNet's test_interp_layer.cpp
(hszhao/PSPNet), and the refusal of the DeepLab v2 layers that PSPNet's fork carries and this
package does not provide (test_bias_channel_layer.cpp, test_domain_transform*_layer.cpp,
test_spatial_product_layer.cpp). References are hand formulas in NumPy, OpenCV, or numerical
gradients."""

import re
import threading
import time

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.data import anno_transform
from pycaffe_lite.data.datum import resize_nearest
from pycaffe_lite.data.prefetch import Prefetcher
from pycaffe_lite.errors import ProtoError
from pycaffe_lite.lifecycle import Resources
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import UnknownTypeError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")


# ---- Upsample (max-unpooling with the Pooling mask) -----------------------------------------
def unpool(params, x, mask):
    layer = make_layer('type: "Upsample" upsample_param { %s }' % params, np.float32)
    bottom, top = random_blobs([x, mask], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def test_upsample_scale_h_and_scale_w_set_the_top_size():
    # SegNet/ENet test_upsample_layer.cpp TestSetup: scale_h 2, scale_w 3 on 2 x 3 x 2 x 2
    _, _, top = unpool("scale_h: 2 scale_w: 3", np.zeros((2, 3, 2, 2)), np.zeros((2, 3, 2, 2)))
    assert top[0].shape == (2, 3, 4, 6)


def test_upsample_forward_square_puts_each_value_at_its_mask_index():
    # SegNet/ENet test_upsample_layer.cpp TestForward (TestForwardSquare): 4 x 3 planes
    x = np.tile(np.array([[1, 2], [9, 4]], np.float32), (4, 3, 1, 1))
    mask = np.tile(np.array([[2, 5], [12, 14]], np.float32), (4, 3, 1, 1))
    layer, bottom, top = unpool("scale: 2", x, mask)
    expected = np.array([[0, 0, 1, 0], [0, 2, 0, 0], [0, 0, 0, 0], [9, 0, 4, 0]], np.float32)
    assert top[0].shape == (4, 3, 4, 4)
    np.testing.assert_array_equal(top[0].data, np.broadcast_to(expected, (4, 3, 4, 4)))
    # backward: each value's gradient is the top gradient at its index
    top[0].diff[...] = np.arange(16, dtype=np.float32).reshape(4, 4)
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.broadcast_to([[2, 5], [12, 14]],
                                                                  (4, 3, 2, 2)))


UNPOOL_NET = """
name: "unpool"
input: "data" input_shape { dim: 2 dim: 3 dim: %d dim: %d }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" top: "mask"
        pooling_param { pool: MAX kernel_h: 2 kernel_w: 2 stride: 2 } }
layer { name: "up" type: "Upsample" bottom: "pool" bottom: "mask" top: "up"
        upsample_param { upsample_h: %d upsample_w: %d } }
"""


@pytest.mark.parametrize("shape,pooled", [((4, 4), (2, 2)), ((5, 4), (3, 2))])
def test_upsample_after_max_pooling_restores_the_maxima(tmp_path, shape, pooled):
    # SegNet/ENet test_upsample_layer.cpp TestForwardFromPool (4 x 4) and
    # TestForwardFromPoolOddShape (5 x 4: the pooled map is 3 x 2, the last row window is cut)
    path = tmp_path / "net.prototxt"
    path.write_text(UNPOOL_NET % (shape + shape))
    net = caffe.Net(str(path), caffe.TEST)
    x = np.random.default_rng(1701).standard_normal((2, 3) + shape).astype(np.float32)
    out = net.forward(data=x)["up"]
    assert net.blobs["pool"].shape == (2, 3) + pooled
    assert out.shape == (2, 3) + shape
    # hand reference: each 2 x 2 window (cut at the border) keeps its maximum where it was
    expected = np.zeros_like(x)
    for i in range(0, shape[0], 2):
        for j in range(0, shape[1], 2):
            win = x[:, :, i:i + 2, j:j + 2]
            flat = win.reshape(2, 3, -1)
            k = flat.argmax(axis=2)
            rows, cols = i + k // win.shape[3], j + k % win.shape[3]
            n, c = np.meshgrid(range(2), range(3), indexing="ij")
            expected[n, c, rows, cols] = x[n, c, rows, cols]
    np.testing.assert_array_equal(out, expected)
    assert (out == 0).sum() == (shape[0] * shape[1] - pooled[0] * pooled[1]) * 2 * 3


def block_corner_mask(shape, scale_h, scale_w):
    """The fork's FillBottomMask: each input pixel names the top-left of its block."""
    h, w = shape[2:]
    index = (np.arange(h)[:, None] * scale_h) * (w * scale_w) + np.arange(w)[None, :] * scale_w
    return np.broadcast_to(index, shape).astype(np.float64)


@pytest.mark.parametrize("scale_h,scale_w", [(2, 3), (3, 2)])
def test_upsample_gradient_with_unequal_factors(scale_h, scale_w):
    # SegNet/ENet test_upsample_layer.cpp TestGradient (scale_h, scale_w in 2..3)
    shape = (2, 3, 2, 2)
    x = random_blobs([shape], seed=1701)[0]
    mask = random_blobs([block_corner_mask(shape, scale_h, scale_w)])[0]
    _, _, top = check_layer('type: "Upsample" upsample_param { scale_h: %d scale_w: %d }'
                            % (scale_h, scale_w), [x, mask], check_bottom=[0],
                            reshape_batch=False)
    expected = np.zeros((2, 3, 2 * scale_h, 2 * scale_w))
    expected[:, :, ::scale_h, ::scale_w] = x.data
    np.testing.assert_array_equal(top[0].data, expected)


# ---- Interp (PSPNet, DeepLab v2) ------------------------------------------------------------
def fork_interp(x, out_h, out_w):
    """caffe_cpu_interp2 by hand, one output pixel at a time: the ratios, source positions
    and fractions in float32, the complementary weight 1 - fraction and the sums in x's type."""
    f32, dtype = np.float32, x.dtype.type
    n, c, h, w = x.shape
    if (h, w) == (out_h, out_w):
        return x.copy()
    rh = f32(h - 1) / f32(out_h - 1) if out_h > 1 else f32(0)
    rw = f32(w - 1) / f32(out_w - 1) if out_w > 1 else f32(0)
    y = np.empty((n, c, out_h, out_w), x.dtype)
    for i in range(out_h):
        pos = f32(rh * f32(i))
        h0 = int(pos)
        hp = 1 if h0 < h - 1 else 0
        b1 = dtype(f32(pos - f32(h0)))
        b0 = dtype(1) - b1
        for j in range(out_w):
            pos = f32(rw * f32(j))
            w0 = int(pos)
            wp = 1 if w0 < w - 1 else 0
            a1 = dtype(f32(pos - f32(w0)))
            a0 = dtype(1) - a1
            y[:, :, i, j] = (b0 * (a0 * x[:, :, h0, w0] + a1 * x[:, :, h0, w0 + wp])
                             + b1 * (a0 * x[:, :, h0 + hp, w0] + a1 * x[:, :, h0 + hp, w0 + wp]))
    return y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size_in,size_out", [((6, 5), (11, 9)), ((5, 7), (23, 37)),
                                              ((13, 11), (6, 41))])
def test_interp_forward_is_the_forks_arithmetic_bit_for_bit(dtype, size_in, size_out):
    # PSPNet test_interp_layer.cpp TestSetup: a 2 x 3 x 6 x 5 Gaussian bottom, height 11,
    # width 9; and sizes whose fractions carry digits below float32's 1 - fraction
    x = np.random.default_rng(1701).standard_normal((2, 3) + size_in).astype(dtype)
    layer = make_layer('type: "Interp" interp_param { height: %d width: %d }' % size_out, dtype)
    bottom, top = random_blobs([x], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].shape == (2, 3) + size_out
    np.testing.assert_array_equal(top[0].data, fork_interp(x, *size_out))


def test_interp_gradient_11_by_9():
    # PSPNet test_interp_layer.cpp TestGradient: 2 x 3 x 6 x 5 to height 11, width 9
    check_layer('type: "Interp" interp_param { height: 11 width: 9 }', [(2, 3, 6, 5)],
                reshape_batch=False)


def test_interp_height_and_width_win_over_both_factors():
    # the fork's order in InterpLayer::Reshape: a factor alone, then height and width, then
    # shrink and zoom together
    layer = make_layer('type: "Interp" interp_param { shrink_factor: 2 zoom_factor: 3 '
                       'height: 4 width: 7 }', np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(random_blobs([(1, 1, 9, 9)], dtype=np.float32), top)
    assert top[0].shape == (1, 1, 4, 7)


# ---- DenseImageData -------------------------------------------------------------------------
DENSE = """
name: "dense"
layer { name: "data" type: "DenseImageData" top: "data" top: "label"
        dense_image_data_param { source: "%s" root_folder: "%s/" batch_size: %d %s } }
"""


def dense_net(tmp_path, batch, params=""):
    path = tmp_path / "net.prototxt"
    path.write_text(DENSE % (tmp_path / "list.txt", tmp_path, batch, params))
    return caffe.Net(str(path), caffe.TRAIN)


def write_image(tmp_path, name, array):
    cv2.imwrite(str(tmp_path / name), array)
    return name


def test_dense_pairs_on_one_line_read_in_order(tmp_path):
    # SegNet test_dense_image_data_layer.cpp TestRead: five pairs written on one line (the
    # fork reads the list word by word), batch 5, labels 0..2, read twice
    rng = np.random.default_rng(1701)
    words, labels = [], []
    for i in range(5):
        img = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
        lab = rng.integers(0, 3, (12, 16), dtype=np.uint8)
        words += [write_image(tmp_path, "i%d.png" % i, img), write_image(tmp_path, "l%d.png" % i,
                                                                          lab)]
        labels.append(lab)
    (tmp_path / "list.txt").write_text(" ".join(words) + " ")
    with dense_net(tmp_path, 5, "shuffle: false") as net:
        assert net.blobs["data"].shape == (5, 3, 12, 16)
        assert net.blobs["label"].shape == (5, 1, 12, 16)
        for _ in range(2):
            net.forward()
            label = net.blobs["label"].data
            np.testing.assert_array_equal(label[:, 0], np.stack(labels))
            assert label.min() == 0 and label.max() == 2
            assert label.mean() == pytest.approx(np.mean(labels), abs=1e-6)


def test_dense_resized_labels_pick_opencvs_nearest_rows(tmp_path):
    # SegNet test_dense_image_data_layer.cpp TestResize: new_height/new_width resize the label
    # with cv::resize INTER_NEAREST (labels stay 0..2). 6 x 9 to 34 x 51 is a size where
    # floor(i * 6 / 34) and OpenCV's floor(i * (1 / (34 / 6))) differ (row 17)
    lab = (np.arange(6)[:, None] + np.arange(9)[None, :]) % 3
    lab = lab.astype(np.uint8)
    img = np.random.default_rng(0).integers(0, 256, (6, 9, 3), dtype=np.uint8)
    (tmp_path / "list.txt").write_text("%s %s\n" % (write_image(tmp_path, "i.png", img),
                                                    write_image(tmp_path, "l.png", lab)))
    with dense_net(tmp_path, 2, "new_height: 34 new_width: 51") as net:
        net.forward()
        assert net.blobs["data"].shape == (2, 3, 34, 51)
        expected = cv2.resize(lab, (51, 34), interpolation=cv2.INTER_NEAREST)
        np.testing.assert_array_equal(net.blobs["label"].data[:, 0], np.stack([expected] * 2))
        assert set(np.unique(net.blobs["label"].data)) <= {0, 1, 2}


def test_nearest_resize_is_opencvs_for_every_small_size():
    # the rule behind DenseImageData's labels and the SSD fork's NEAREST warp
    src = np.arange(40 * 40, dtype=np.uint16).reshape(40, 40)
    for h, w in [(6, 9), (9, 10), (40, 40), (17, 23)]:
        for out_h, out_w in [(34, 51), (74, 98), (3, 5), (h, w), (111, 148)]:
            part = np.ascontiguousarray(src[:h, :w])
            np.testing.assert_array_equal(
                resize_nearest(part, out_h, out_w),
                cv2.resize(part, (out_w, out_h), interpolation=cv2.INTER_NEAREST))
    # the SSD fork's NEAREST warp (its im_transforms.cpp: cv::resize with INTER_NEAREST)
    p = caffe_pb2.ResizeParameter(height=34, width=51,
                                  interp_mode=[caffe_pb2.ResizeParameter.NEAREST])
    img = np.random.default_rng(1).integers(0, 256, (6, 9, 3), dtype=np.uint8)
    np.testing.assert_array_equal(anno_transform.warp(img, p, np.random.default_rng(0)),
                                  cv2.resize(img, (51, 34), interpolation=cv2.INTER_NEAREST))


def test_dense_batch_of_one_reshapes_to_each_image(tmp_path):
    # SegNet test_dense_image_data_layer.cpp TestReshape: batch 1, no resize or crop: each
    # image keeps its size (the fork's cat 360 x 480, fish-bike 323 x 481; here 9 x 12, 7 x 13)
    lines = []
    for i, size in enumerate([(9, 12), (7, 13)]):
        img = np.full(size + (3,), 10 * i, np.uint8)
        lab = np.full(size, i + 1, np.uint8)
        lines.append("%s %s" % (write_image(tmp_path, "i%d.png" % i, img),
                                write_image(tmp_path, "l%d.png" % i, lab)))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    with dense_net(tmp_path, 1) as net:
        for size, value in [((9, 12), 1), ((7, 13), 2), ((9, 12), 1)]:
            net.forward()
            assert net.blobs["data"].shape == (1, 3) + size
            assert net.blobs["label"].shape == (1, 1) + size
            assert (net.blobs["label"].data == value).all()


def test_dense_shuffle_gives_every_pair_once_per_epoch(tmp_path):
    # SegNet test_dense_image_data_layer.cpp TestShuffle (its value checks, commented out in
    # the fork, made to hold here): batch 5 of 5 pairs, each pair once, image and label together
    lines = []
    for i in range(5):
        lines.append("%s %s" % (write_image(tmp_path, "i%d.png" % i, np.full((4, 5, 3), 40 * i,
                                                                          np.uint8)),
                                write_image(tmp_path, "l%d.png" % i, np.full((4, 5), i, np.uint8))))
    (tmp_path / "list.txt").write_text("\n".join(lines))
    caffe.set_random_seed(1701)
    with dense_net(tmp_path, 5, "shuffle: true") as net:
        orders = []
        for _ in range(4):
            net.forward()
            order = net.blobs["label"].data[:, 0, 0, 0].astype(int)
            assert sorted(order) == [0, 1, 2, 3, 4]
            np.testing.assert_array_equal(net.blobs["data"].data[:, 0, 0, 0], 40 * order)
            orders.append(tuple(order))
        assert any(order != (0, 1, 2, 3, 4) for order in orders)


# ---- DeepLab v2's layers in PSPNet's fork: refused, naming the fork -------------------------
NOT_PROVIDED = """
name: "deeplab"
input: "data" input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }
input: "more" input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }
layer { name: "odd_one" type: "%s" bottom: "data" bottom: "more" top: "out" %s }
"""


@pytest.mark.parametrize("layer_type", ["BiasChannel", "AdaptiveBiasChannel", "DomainTransform",
                                        "DomainTransformForwardOnly", "SpatialProduct",
                                        "UniqueLabel", "MatRead"])
def test_deeplab_v2_layer_is_refused_naming_layer_type_and_fork(tmp_path, layer_type):
    # PSPNet's test_bias_channel_layer.cpp, test_domain_transform_layer.cpp,
    # test_domain_transform_forward_only_layer.cpp, test_spatial_product_layer.cpp (and the
    # fork's other DeepLab v2 types): layers this package does not provide
    path = tmp_path / "net.prototxt"
    path.write_text(NOT_PROVIDED % (layer_type, ""))
    with pytest.raises(UnknownTypeError) as info:
        caffe.Net(str(path), caffe.TEST)
    message = str(info.value)
    assert "layer 'odd_one' has type %s" % layer_type in message
    assert "DeepLab v2" in message and "does not implement" in message


@pytest.mark.parametrize("field,types", [
    ("bias_channel_param { bg_bias: 1 fg_bias: 2 }", "BiasChannel"),
    ("domain_transform_param { num_iter: 3 spatial_sigma: 50 }",
     "DomainTransform and DomainTransformForwardOnly layers"),
])
def test_deeplab_v2_parameters_in_a_prototxt_name_the_layer_types(tmp_path, field, types):
    path = tmp_path / "net.prototxt"
    path.write_text(NOT_PROVIDED % ("BiasChannel", field))
    with pytest.raises(ProtoError) as info:
        caffe.Net(str(path), caffe.TEST)
    message = str(info.value)
    assert re.search(r"net\.prototxt.*\b5\b", message)
    assert types in message and "DeepLab v2" in message and "does not implement" in message


# ---- DenseImageData's loading threads: a net collected in one of them ----------------------
class _Owner:
    """Stands for a data layer that owns a prefetcher (its release closes it)."""


def test_owner_collected_in_its_own_loading_thread_releases_without_deadlock():
    # Found with the DenseImageData cases above: a dropped net's finalizer ran in one of its
    # loading threads while that thread held the prefetcher's plan lock, and joined the other
    # loading thread, which was waiting for that lock (the interpreter's exit then hung)
    holder, planners = [], []

    def plan():
        planners.append(threading.current_thread())
        if len(planners) == 1:
            # the second thread has taken a batch: it now waits for the plan lock held here
            while len(prefetcher._shared.free) > prefetcher.count - 1:
                time.sleep(0.001)
            holder.clear()  # the owner's last reference: its finalizer runs in this thread
        return None, None

    prefetcher = Prefetcher(plan, lambda plan, blobs: None, lambda: [], count=4, threads=2)
    owner = _Owner()
    owner.resources = Resources(owner, "a data layer")
    owner.resources.push(prefetcher.close)
    holder.append(owner)
    del owner
    prefetcher.start()
    threads = prefetcher.worker_threads
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert prefetcher.closed
