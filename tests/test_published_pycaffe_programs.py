"""The core code paths of widely used pycaffe programs, written for BVLC's pycaffe (and
py-faster-rcnn's fork of it), run with ``import pycaffe_lite as caffe``: DeepDream's gradient
ascent step, neural style transfer's layer-by-layer backward, FCN's net surgery and
py-faster-rcnn's Python layers and solver wrapper. Small nets written here; values checked
against central differences in float64 and hand computations."""

import sys

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import plugins


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """Write modules into tmp_path, importable by name; 'caffe' aliases undone afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(plugins, "_aliased", [], raising=False)
    before = set(sys.modules)
    written = []

    def write(stem, source):
        name = "%s_%d" % (stem, id(tmp_path))
        (tmp_path / (name + ".py")).write_text(source)
        written.append(name)
        return name

    yield write
    for name in set(sys.modules) - before:
        if name in written or name == "caffe" or name.startswith("caffe."):
            del sys.modules[name]


# ---- py-faster-rcnn: its Python layers read self.param_str_ and str(self.phase) --------------

# As py-faster-rcnn's lib/rpn and lib/roi_data_layer layers do: the fork (caffe-fast-rcnn) sets
# `param_str_`, and the layers look their per-phase settings up by `str(self.phase)`.
FASTER_RCNN_STYLE = '''
import caffe
import numpy as np

CFG = {"TRAIN": {"PRE_NMS_TOP_N": 12000}, "TEST": {"PRE_NMS_TOP_N": 6000}}


class ScaleByParam(caffe.Layer):
    def setup(self, bottom, top):
        params = eval("{" + self.param_str_ + "}")
        self._scale = params["scale"]

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self._scale * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        pass


class TopNByPhase(caffe.Layer):
    def setup(self, bottom, top):
        cfg_key = str(self.phase)
        self._top_n = CFG[cfg_key]["PRE_NMS_TOP_N"]

    def reshape(self, bottom, top):
        top[0].reshape(1)

    def forward(self, bottom, top):
        top[0].data[...] = self._top_n

    def backward(self, top, propagate_down, bottom):
        pass
'''


def _python_net(tmp_path, module, layer, param_str=""):
    path = tmp_path / ("%s.prototxt" % layer)
    path.write_text('''name: "py"
input: "x"
input_shape { dim: 2 dim: 3 }
layer { name: "mine" type: "Python" bottom: "x" top: "y"
  python_param { module: "%s" layer: "%s" param_str: "%s" } }
''' % (module, layer, param_str))
    return str(path)


def test_a_python_layer_reads_param_str_under_the_name_py_faster_rcnn_uses(tmp_path,
                                                                          user_modules):
    module = user_modules("frcnn_style", FASTER_RCNN_STYLE)
    net = caffe.Net(_python_net(tmp_path, module, "ScaleByParam", "'scale': 3"), caffe.TEST)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_array_equal(net.forward(x=x)["y"], 3 * x)
    mine = net.layer_dict["mine"]
    assert mine.param_str_ == mine.param_str == "'scale': 3"


def test_a_python_layers_phase_prints_as_train_or_test(tmp_path, user_modules):
    """caffe.TRAIN / caffe.TEST print their names, as pycaffe's Phase enum values do, and stay
    the ints 0 and 1; a layer picks its settings by str(self.phase) as py-faster-rcnn's do."""
    assert (str(caffe.TRAIN), str(caffe.TEST)) == ("TRAIN", "TEST")
    assert (caffe.TRAIN, caffe.TEST) == (0, 1) and "%d" % caffe.TEST == "1"
    module = user_modules("frcnn_style", FASTER_RCNN_STYLE)
    model = _python_net(tmp_path, module, "TopNByPhase")
    x = np.zeros((2, 3), np.float32)
    for phase, top_n in ((caffe.TRAIN, 12000), (caffe.TEST, 6000)):
        net = caffe.Net(model, phase)
        mine = net.layer_dict["mine"]
        assert mine.phase == phase and str(mine.phase) == str(phase)
        assert net.forward(x=x)["y"][0] == top_n


# ---- google/deepdream: forward(end=...), dst.diff = dst.data, backward(start=...) ------------

DREAM_NET = '''name: "dream"
input: "data"
input_shape { dim: 1 dim: 3 dim: 13 dim: 13 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 stride: 2 pad: 1
    weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 3 stride: 1 } }
layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1" lrn_param { local_size: 3 } }
layer { name: "incep/1x1" type: "Convolution" bottom: "norm1" top: "incep/1x1"
  convolution_param { num_output: 3 kernel_size: 1
    weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "incep/relu_1x1" type: "ReLU" bottom: "incep/1x1" top: "incep/1x1" }
layer { name: "incep/3x3" type: "Convolution" bottom: "norm1" top: "incep/3x3"
  convolution_param { num_output: 2 kernel_size: 3 pad: 1
    weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "incep/relu_3x3" type: "ReLU" bottom: "incep/3x3" top: "incep/3x3" }
layer { name: "incep/output" type: "Concat" bottom: "incep/1x1" bottom: "incep/3x3"
  top: "incep/output" }
layer { name: "fc" type: "InnerProduct" bottom: "incep/output" top: "fc"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
'''


def test_deepdream_step_gradient_equals_central_differences(tmp_path):
    """dream.ipynb patches force_backward in through caffe.io.caffe_pb2 and text_format, runs
    forward(end=END), sets the end blob's diff to its data (the L2 objective) and runs
    backward(start=END): the input's diff is d(0.5 * |end|^2)/d(input)."""
    model = caffe.io.caffe_pb2.NetParameter()
    text_format.Merge(DREAM_NET, model)
    model.force_backward = True
    (tmp_path / "tmp.prototxt").write_text(str(model))
    caffe.set_random_seed(3)
    net = caffe.Net(str(tmp_path / "tmp.prototxt"), caffe.TEST, dtype=np.float64)
    end = "incep/output"
    src, dst = net.blobs["data"], net.blobs[end]
    rng = np.random.RandomState(0)
    x = rng.uniform(-1, 1, src.data.shape[1:])

    def objective(image):
        src.data[0] = image
        net.forward(end=end)
        return 0.5 * np.sum(dst.data ** 2)

    objective(x)
    assert "fc" not in net.forward(end=end)  # nothing past END ran for its outputs
    dst.diff[:] = dst.data
    net.backward(start=end)
    g = src.diff[0].copy()
    eps = 1e-6
    for c, i, j in zip(rng.randint(0, 3, 12), rng.randint(0, 13, 12), rng.randint(0, 13, 12)):
        step = np.zeros_like(x)
        step[c, i, j] = eps
        numeric = (objective(x + step) - objective(x - step)) / (2 * eps)
        np.testing.assert_allclose(g[c, i, j], numeric, rtol=1e-5, atol=1e-9)
    # the ascent step itself: src.data[:] += step_size / mean|g| * g
    src.data[0] = x
    src.data[:] += 1.5 / np.abs(g).mean() * g
    np.testing.assert_allclose(src.data[0], x + 1.5 / np.abs(g).mean() * g)


# ---- fzliu/style-transfer: a gradient injected layer by layer through backward(start, end) ---

STYLE_NET = '''name: "style"
force_backward: true
input: "data"
input_shape { dim: 1 dim: 3 dim: 10 dim: 8 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1
    weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "r1" }
layer { name: "conv2" type: "Convolution" bottom: "r1" top: "conv2"
  convolution_param { num_output: 5 kernel_size: 3 pad: 1
    weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "r2" }
layer { name: "pool2" type: "Pooling" bottom: "r2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv3" type: "Convolution" bottom: "pool2" top: "conv3"
  convolution_param { num_output: 3 kernel_size: 3 pad: 1
    weight_filler { type: "gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.1 } } }
'''


def test_style_transfer_layerwise_backward_chain_is_the_gradient_of_the_style_loss(tmp_path):
    """style.py's style_optimizer: forward to the last param layer, then for each param layer
    from the last, add that layer's Gram-matrix loss gradient to its blob's diff and run
    backward(start=layer, end=next_layer); the data diff is then the loss's gradient (here the
    features are the convolutions' own tops, so the chain is exact)."""
    (tmp_path / "style.prototxt").write_text(STYLE_NET)
    caffe.set_random_seed(5)
    net = caffe.Net(str(tmp_path / "style.prototxt"), caffe.TEST, dtype=np.float64)
    rng = np.random.RandomState(1)
    weights = {"conv1": 0.3, "conv2": 0.5, "conv3": 0.2}
    # style Gram matrices (symmetric, as style.py's G_style)
    style = {name: rng.uniform(0, 1, (n, 7)) for name, n in
             (("conv1", 4), ("conv2", 5), ("conv3", 3))}
    targets = {name: f.dot(f.T) for name, f in style.items()}

    def features(x):
        net.blobs["data"].data[0] = x
        net.forward(end=list(net.params.keys())[-1])
        return {name: net.blobs[name].data[0].reshape(net.blobs[name].channels, -1).copy()
                for name in weights}

    def loss_and_grad(x):
        layers = list(net.params.keys())
        net.blobs[layers[-1]].diff[:] = 0
        F = features(x)
        loss = 0.0
        layers.reverse()
        for i, layer in enumerate(layers):
            next_layer = None if i == len(layers) - 1 else layers[i + 1]
            grad = net.blobs[layer].diff[0]
            n, m = F[layer].shape
            c = 1.0 / (n ** 2 * m ** 2)
            delta = F[layer].dot(F[layer].T) - targets[layer]
            loss += weights[layer] * c / 4 * np.sum(delta ** 2)
            grad += weights[layer] * (c * delta.dot(F[layer])).reshape(grad.shape)
            net.backward(start=layer, end=next_layer)
        return loss, net.blobs["data"].diff[0].copy()

    x = rng.uniform(-1, 1, (3, 10, 8))
    loss, g = loss_and_grad(x)
    eps = 1e-6
    for c, i, j in zip(rng.randint(0, 3, 10), rng.randint(0, 10, 10), rng.randint(0, 8, 10)):
        step = np.zeros_like(x)
        step[c, i, j] = eps
        numeric = (loss_and_grad(x + step)[0] - loss_and_grad(x - step)[0]) / (2 * eps)
        np.testing.assert_allclose(g[c, i, j], numeric, rtol=1e-5, atol=1e-10)


# ---- shelhamer/fcn.berkeleyvision.org: NetSpec + Python data layer, surgery, seg scoring -----

SEG_DATA_LAYER = '''
import caffe
import numpy as np


class SegDataLayer(caffe.Layer):
    """One image of its own size per forward, as voc_layers.VOCSegDataLayer."""

    def setup(self, bottom, top):
        params = eval(self.param_str)
        self.mean = np.array(params["mean"])
        self.rng = np.random.RandomState(params["seed"])
        self.sizes = params["sizes"]
        self.idx = 0
        if len(top) != 2:
            raise Exception("Need to define two tops: data and label.")

    def reshape(self, bottom, top):
        h, w = self.sizes[self.idx % len(self.sizes)]
        rng = np.random.RandomState(self.idx)
        self.data = (rng.uniform(0, 255, (h, w, 3))[:, :, ::-1] - self.mean).transpose((2, 0, 1))
        self.label = rng.randint(0, 3, (1, h, w)).astype(np.uint8)
        self.label[:, :2] = 255
        top[0].reshape(1, *self.data.shape)
        top[1].reshape(1, *self.label.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.data
        top[1].data[...] = self.label
        self.idx += 1

    def backward(self, top, propagate_down, bottom):
        pass
'''


def _upsample_filt(size):
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    og = np.ogrid[:size, :size]
    return (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)


def test_fcn_surgery_solver_and_seg_scoring(tmp_path, user_modules, monkeypatch):
    from pycaffe_lite import layers as L, params as P
    from pycaffe_lite.coord_map import crop

    module = user_modules("seg_layers", SEG_DATA_LAYER)
    monkeypatch.chdir(tmp_path)
    classes = 3

    def fcn(split):
        n = caffe.NetSpec()
        n.data, n.label = L.Python(module=module, layer="SegDataLayer", ntop=2, param_str=str(
            dict(split=split, mean=(104.0, 116.7, 122.7), seed=1, sizes=[(12, 14), (9, 11)])))
        n.conv1 = L.Convolution(n.data, kernel_size=3, pad=10, num_output=4,
                                weight_filler=dict(type="gaussian", std=0.01),
                                param=[dict(lr_mult=1, decay_mult=1),
                                       dict(lr_mult=2, decay_mult=0)])
        n.relu1 = L.ReLU(n.conv1, in_place=True)
        n.pool1 = L.Pooling(n.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
        n.score_fr = L.Convolution(n.pool1, num_output=classes, kernel_size=1,
                                   weight_filler=dict(type="gaussian", std=0.1))
        n.upscore = L.Deconvolution(n.score_fr, convolution_param=dict(
            num_output=classes, kernel_size=4, stride=2, bias_term=False),
            param=[dict(lr_mult=0)])
        n.score = crop(n.upscore, n.data)
        n.loss = L.SoftmaxWithLoss(n.score, n.label,
                                   loss_param=dict(normalize=False, ignore_label=255))
        return n.to_proto()

    (tmp_path / "train.prototxt").write_text(str(fcn("train")))
    (tmp_path / "val.prototxt").write_text(str(fcn("seg11valid")))
    (tmp_path / "solver.prototxt").write_text(
        'train_net: "train.prototxt"\ntest_net: "val.prototxt"\ntest_iter: 1\n'
        'test_interval: 1000000\ntest_initialization: false\nbase_lr: 1e-6\n'
        'lr_policy: "fixed"\nmomentum: 0.9\ndisplay: 0\nsnapshot: 0\n')
    caffe.set_random_seed(7)
    solver = caffe.SGDSolver("solver.prototxt")
    # surgery.interp: bilinear kernels on the diagonal by fancy indexing
    interp_layers = [k for k in solver.net.params.keys() if "up" in k]
    assert interp_layers == ["upscore"]
    m, k, h, w = solver.net.params["upscore"][0].data.shape
    solver.net.params["upscore"][0].data[range(m), range(k), :, :] = _upsample_filt(h)
    solver.step(2)
    up = solver.net.params["upscore"][0].data
    for i in range(m):
        for j in range(k):
            want = _upsample_filt(4) if i == j else np.zeros((4, 4))
            np.testing.assert_array_equal(up[i, j], want)  # lr_mult 0: never updated
    # score.seg_tests: the test net shares the train net's weights, one image per forward
    net = solver.test_nets[0]
    net.share_with(solver.net)
    assert net.blobs["score"].channels == classes
    solver.net.params["score_fr"][0].data[...] *= 2  # shared: the test net sees it
    n_cl = net.blobs["score"].channels
    hist = np.zeros((n_cl, n_cl))
    for size in [(12, 14), (9, 11)]:
        out = net.forward()
        score, label = net.blobs["score"].data[0], net.blobs["label"].data[0, 0]
        assert score.shape == (classes,) + size  # crop(upscore, data): the input's size
        a, b = label.flatten(), score.argmax(0).flatten()
        keep = (a >= 0) & (a < n_cl)
        hist += np.bincount(n_cl * a[keep].astype(int) + b[keep],
                            minlength=n_cl ** 2).reshape(n_cl, n_cl)
        # SoftmaxWithLoss, normalize false, ignore 255: the sum over labelled pixels
        z = score - score.max(0)
        logp = z - np.log(np.exp(z).sum(0))
        ii, jj = np.nonzero(label != 255)
        want = -logp[label[ii, jj].astype(int), ii, jj].sum()
        np.testing.assert_allclose(out["loss"], want, rtol=1e-4)
    assert hist.sum() == (12 - 2) * 14 + (9 - 2) * 11
    # the doubled weights reached the test net: its score_fr equals the train net's
    np.testing.assert_array_equal(net.params["score_fr"][0].data,
                                  solver.net.params["score_fr"][0].data)


# ---- py-faster-rcnn: train.py's SolverWrapper and test.py's im_detect ------------------------

ROI_DATA_LAYER = '''
import caffe
import numpy as np


class RoIDataLayer(caffe.Layer):
    """As lib/roi_data_layer/layer.py: tops shaped with dummy sizes in setup and reshaped
    to each minibatch in forward; the roidb comes through solver.net.layers[0]."""

    def set_roidb(self, roidb):
        self._roidb = roidb
        self._cur = 0

    def setup(self, bottom, top):
        self._num_classes = eval("{" + self.param_str_ + "}")["num_classes"]
        self._name_to_top_map = {"data": 0, "rois": 1, "labels": 2, "bbox_targets": 3,
                                 "bbox_inside_weights": 4, "bbox_outside_weights": 5}
        top[0].reshape(1, 3, 100, 100)
        top[1].reshape(1, 5)
        top[2].reshape(1)
        for i in (3, 4, 5):
            top[i].reshape(1, self._num_classes * 4)

    def forward(self, bottom, top):
        blobs = self._roidb[self._cur % len(self._roidb)]
        self._cur += 1
        for blob_name, blob in blobs.items():
            top_ind = self._name_to_top_map[blob_name]
            top[top_ind].reshape(*(blob.shape))
            top[top_ind].data[...] = blob.astype(np.float32, copy=False)

    def backward(self, top, propagate_down, bottom):
        pass

    def reshape(self, bottom, top):
        pass
'''

FRCNN_HEAD = '''
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2
    weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "roi_pool" type: "ROIPooling" bottom: "conv1" bottom: "rois" top: "pool5"
  roi_pooling_param { pooled_w: 2 pooled_h: 2 spatial_scale: 0.5 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool5" top: "fc"
  inner_product_param { num_output: 8 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "cls_score" type: "InnerProduct" bottom: "fc" top: "cls_score"
  inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bbox_pred" type: "InnerProduct" bottom: "fc" top: "bbox_pred"
  inner_product_param { num_output: 12 weight_filler { type: "gaussian" std: 0.1 } } }
'''


def test_faster_rcnn_solver_wrapper_snapshot_and_im_detect(tmp_path, user_modules,
                                                           monkeypatch):
    module = user_modules("roi_data_layer", ROI_DATA_LAYER)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.prototxt").write_text(
        'name: "frcnn"\nlayer { name: "data" type: "Python" top: "data" top: "rois" '
        'top: "labels" top: "bbox_targets" top: "bbox_inside_weights" '
        'top: "bbox_outside_weights"\n  python_param { module: "%s" layer: "RoIDataLayer" '
        'param_str: "\'num_classes\': 3" } }\n%s'
        'layer { name: "loss_cls" type: "SoftmaxWithLoss" bottom: "cls_score" '
        'bottom: "labels" top: "loss_cls" }\n'
        'layer { name: "loss_bbox" type: "SmoothL1Loss" bottom: "bbox_pred" '
        'bottom: "bbox_targets" bottom: "bbox_inside_weights" bottom: "bbox_outside_weights" '
        'top: "loss_bbox" loss_weight: 1 }\n' % (module, FRCNN_HEAD))
    (tmp_path / "test.prototxt").write_text(
        'name: "frcnn"\ninput: "data"\ninput_shape { dim: 1 dim: 3 dim: 20 dim: 20 }\n'
        'input: "rois"\ninput_shape { dim: 1 dim: 5 }\n%s'
        'layer { name: "cls_prob" type: "Softmax" bottom: "cls_score" top: "cls_prob" }\n'
        % FRCNN_HEAD)
    (tmp_path / "solver.prototxt").write_text(
        'train_net: "train.prototxt"\nbase_lr: 0.01\nlr_policy: "step"\ngamma: 0.1\n'
        'stepsize: 50000\ndisplay: 0\nmomentum: 0.9\nweight_decay: 0.0005\nsnapshot: 0\n'
        'snapshot_prefix: "vgg_cnn_m_1024_fast_rcnn"\n')
    rng = np.random.RandomState(0)
    roidb = []
    for i in range(3):
        h, w = 20 + 2 * i, 24
        targets, weights = np.zeros((3, 12), np.float32), np.zeros((3, 12), np.float32)
        targets[0, 4:8], targets[1, 8:12] = rng.randn(4), rng.randn(4)
        weights[0, 4:8] = weights[1, 8:12] = 1
        roidb.append({"data": rng.randn(1, 3, h, w).astype(np.float32),
                      "rois": np.array([[0, 1, 1, 10, 12], [0, 3, 2, 18, 15],
                                        [0, 0, 0, w - 1, h - 1]], np.float32),
                      "labels": np.array([1, 2, 0], np.float32),
                      "bbox_targets": targets, "bbox_inside_weights": weights,
                      "bbox_outside_weights": weights})
    caffe.set_random_seed(11)
    solver = caffe.SGDSolver("solver.prototxt")
    solver_param = caffe.proto.caffe_pb2.SolverParameter()
    with open("solver.prototxt", "rt") as f:
        text_format.Merge(f.read(), solver_param)
    solver.net.layers[0].set_roidb(roidb)
    while solver.iter < 4:
        solver.step(1)
    # snapshot(): unnormalize bbox_pred, save, restore
    net = solver.net
    stds = np.array([0.1, 0.1, 0.2, 0.2] * 3, np.float32)
    means = np.array([0.0, 0.5, 0.0, -0.5] * 3, np.float32)
    orig_0 = net.params["bbox_pred"][0].data.copy()
    orig_1 = net.params["bbox_pred"][1].data.copy()
    net.params["bbox_pred"][0].data[...] = net.params["bbox_pred"][0].data * stds[:, np.newaxis]
    net.params["bbox_pred"][1].data[...] = net.params["bbox_pred"][1].data * stds + means
    filename = solver_param.snapshot_prefix + "_iter_{:d}".format(solver.iter) + ".caffemodel"
    net.save(str(filename))
    net.params["bbox_pred"][0].data[...] = orig_0
    net.params["bbox_pred"][1].data[...] = orig_1
    assert filename == "vgg_cnn_m_1024_fast_rcnn_iter_4.caffemodel"
    # im_detect on the saved model
    test = caffe.Net("test.prototxt", filename, caffe.TEST)
    np.testing.assert_allclose(test.params["bbox_pred"][0].data, orig_0 * stds[:, None],
                               rtol=1e-6)
    np.testing.assert_allclose(test.params["bbox_pred"][1].data, orig_1 * stds + means,
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(net.params["bbox_pred"][0].data, orig_0)
    blobs = {"data": roidb[1]["data"], "rois": roidb[1]["rois"]}
    test.blobs["data"].reshape(*(blobs["data"].shape))
    test.blobs["rois"].reshape(*(blobs["rois"].shape))
    blobs_out = test.forward(data=blobs["data"].astype(np.float32, copy=False),
                             rois=blobs["rois"].astype(np.float32, copy=False))
    assert sorted(blobs_out) == ["bbox_pred", "cls_prob"]
    assert blobs_out["cls_prob"].shape == (3, 3) and blobs_out["bbox_pred"].shape == (3, 12)
    scores = test.blobs["cls_score"].data
    np.testing.assert_allclose(blobs_out["cls_prob"],
                               np.exp(scores) / np.exp(scores).sum(1, keepdims=True), rtol=1e-5)
    # the train net on the same image (its data layer's next minibatch) scores the same boxes
    solver.net.layers[0]._cur = 1
    solver.net.forward()
    np.testing.assert_allclose(solver.net.blobs["cls_score"].data, scores, rtol=1e-5, atol=1e-6)
    # and its deltas, unnormalized, are the saved model's
    np.testing.assert_allclose(solver.net.blobs["bbox_pred"].data * stds + means,
                               blobs_out["bbox_pred"], rtol=1e-4, atol=1e-6)


# ---- BVLC examples/web_demo/app.py: caffe.io.load_image on a downloaded image's bytes --------

def test_load_image_reads_a_file_object_as_the_web_demo_passes_one(tmp_path):
    import io

    from PIL import Image

    pixels = np.random.RandomState(2).randint(0, 256, (5, 7, 3)).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "png")
    string_buffer = io.BytesIO(buf.getvalue())  # classify_url: the URL's bytes in a buffer
    image = caffe.io.load_image(string_buffer)
    assert image.shape == (5, 7, 3) and image.dtype == np.float32
    np.testing.assert_allclose(image, pixels / 255.0, rtol=1e-6)
    grey = caffe.io.load_image(io.BytesIO(buf.getvalue()), color=False)
    np.testing.assert_allclose(grey[:, :, 0], pixels / 255.0 @ [0.2125, 0.7154, 0.0721],
                               rtol=1e-5)
    with pytest.raises(caffe.CaffeError, match="file name or a file object.*ndarray"):
        caffe.io.load_image(pixels)


# ---- data layers of published repos keep a phase of their own in self.phase ---------------

OWN_PHASE_LAYER = '''
import caffe


class SplitDataLayer(caffe.Layer):
    """As many published data layers do: self.phase = params['phase'] in setup."""

    def setup(self, bottom, top):
        params = eval(self.param_str)
        self.net_phase = self.phase
        self.phase = params["phase"]
        top[0].reshape(2, 3)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        top[0].data[...] = 1.0 if self.phase == "train" else 2.0

    def backward(self, top, propagate_down, bottom):
        pass
'''


def test_a_python_layer_may_keep_its_own_value_in_self_phase(tmp_path, user_modules):
    module = user_modules("own_phase", OWN_PHASE_LAYER)
    model = tmp_path / "own_phase.prototxt"
    model.write_text('''name: "own"
layer { name: "data" type: "Python" top: "data"
  python_param { module: "%s" layer: "SplitDataLayer" param_str: "{'phase': 'val'}" } }
''' % module)
    net = caffe.Net(str(model), caffe.TRAIN)
    np.testing.assert_array_equal(net.forward()["data"], np.full((2, 3), 2.0))
    layer = net.layer_dict["data"]
    assert layer.net_phase == caffe.TRAIN and layer.phase == "val"
