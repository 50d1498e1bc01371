"""The GPU-mode parity cases shared by tests/test_gpu_simulated.py (simulated device, every
machine) and tests/test_gpu_cupy.py (a real GPU): one or more cases per registered layer type,
the runner, and a small LeNet-style net with its solvers."""

import collections
import contextlib
import textwrap
from unittest import mock

import numpy as np

from pycaffe_lite import backend
from pycaffe_lite.blob import Blob
from pycaffe_lite.layers import create_layer
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import layer_param

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST

def _rng(seed=0):
    return np.random.default_rng(seed)


def _u(shape, seed=0, low=-1.0, high=1.0):
    return _rng(seed).uniform(low, high, shape).astype(np.float32)


def _labels(n, classes, seed=1, shape=None):
    lab = _rng(seed).integers(0, classes, n).astype(np.float32)
    return lab.reshape(shape) if shape is not None else lab


# ---- the cases: one or more per registered layer type ----------------------------------------
Case = collections.namedtuple("Case", "type text bottoms down tops phase host_io prepare")


def case(type_, text, bottoms, down=None, tops=1, phase=TRAIN, host_io=False, prepare=None):
    """``down``: propagate_down per bottom (default all True); ``host_io``: the layer reads or
    writes host memory by design (data, file output and pycaffe-style Python layers);
    ``prepare(layer)`` runs after setup."""
    return Case(type_, text, bottoms, down, tops, phase, host_io, prepare)


def _memory_data(layer):
    layer.reset(_u((4, 1, 2, 2), 4), np.arange(4, dtype=np.float32))


CONV = ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2 '
        'group: 2 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "uniform" '
        'min: -0.5 max: 0.5 } }')
X4 = (2, 4, 6, 5)

def _ssd_priors():
    """A PriorBox top (2 x 2 map, 4 priors per cell) for the SSD cases."""
    layer = create_layer(layer_param('type: "PriorBox" prior_box_param { min_size: 9 '
                                     'max_size: 18 aspect_ratio: 2 variance: 0.1 '
                                     'variance: 0.1 variance: 0.2 variance: 0.2 }'))
    bottom = [Blob((1, 1, 2, 2), np.float32), Blob((1, 3, 20, 20), np.float32)]
    top = [Blob((), np.float32)]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return top[0].data.copy()


SSD_PRIORS = _ssd_priors()
SSD_GT = np.array([[[[0, 1, 0, 0.1, 0.1, 0.6, 0.55, 0], [0, 2, 1, 0.5, 0.4, 0.95, 0.95, 0],
                     [1, 1, 0, 0.2, 0.3, 0.7, 0.8, 0]]]], np.float32)


def _ssd_probs(seed):
    z = _u((2, 16, 3), seed, -3, 3)
    e = np.exp(z - z.max(axis=2, keepdims=True))
    return (e / e.sum(axis=2, keepdims=True)).reshape(2, 48)


CASES = [
    case("AbsVal", 'type: "AbsVal"', [_u((2, 3, 4))]),
    case("Axpy", 'type: "Axpy"', [_u((2, 3, 1, 1)), _u((2, 3, 4, 5), 1), _u((2, 3, 4, 5), 2)]),
    case("Axpy", 'type: "Axpy"', [_u((2, 3)), _u((2, 3, 4), 1), _u((2, 3, 4), 2)]),
    case("Accuracy", 'type: "Accuracy" accuracy_param { top_k: 2 }',
         [_u((6, 5)), _labels(6, 5)], down=[False, False], tops=2),
    case("ArgMax", 'type: "ArgMax" argmax_param { top_k: 2 out_max_val: true axis: 1 }',
         [_u((2, 5, 3))], down=[False]),
    case("AnnotatedData", 'type: "AnnotatedData" data_param {{ source: "{annolmdb}" '
         'batch_size: 3 backend: LMDB }} transform_param {{ mirror: true resize_param {{ '
         'height: 6 width: 6 }} }} annotated_data_param {{ batch_sampler {{ }} batch_sampler '
         '{{ sampler {{ min_scale: 0.5 }} max_trials: 5 }} }}', [], tops=2, host_io=True),
    case("BNLL", 'type: "BNLL"', [_u((2, 3, 4))]),
    case("BatchNorm", 'type: "BatchNorm"', [_u((4, 3, 2, 2))]),
    case("BatchNorm", 'type: "BatchNorm" batch_norm_param { use_global_stats: false }',
         [_u((4, 3, 2, 2))], phase=TEST),
    case("BatchReindex", 'type: "BatchReindex"',
         [_u((4, 3)), np.array([3, 0, 3, 1, 2], np.float32)], down=[True, False]),
    case("Bias", 'type: "Bias" bias_param { axis: 1 num_axes: 1 filler { type: "uniform" } }',
         [_u((2, 3, 4))]),
    case("Bias", 'type: "Bias" bias_param { axis: 1 }', [_u((2, 3, 4)), _u((3,), 5)]),
    case("Clip", 'type: "Clip" clip_param { min: -0.5 max: 0.4 }', [_u((2, 3, 4))]),
    case("Concat", 'type: "Concat" concat_param { axis: 1 }', [_u((2, 3, 2)), _u((2, 4, 2), 3)]),
    case("ContrastiveLoss", 'type: "ContrastiveLoss" contrastive_loss_param { margin: 1.5 }',
         [_u((4, 3)), _u((4, 3), 2), np.array([1, 0, 0, 1], np.float32)],
         down=[True, True, False]),
    case("ConvolutionDepthwise", 'type: "ConvolutionDepthwise" convolution_param { kernel_size: 3 '
         'pad: 1 stride: 2 weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: '
         '"uniform" } }', [_u(X4)]),
    case("Convolution", CONV, [_u(X4)]),
    case("Convolution", CONV.replace("pad: 1 stride: 2", "dilation: 2") + " convolution_param "
         "{ engine: CAFFE }", [_u((2, 4, 7, 7))]),
    case("Convolution", 'type: "Convolution" convolution_param { num_output: 3 kernel_size: 1 '
         'weight_filler { type: "xavier" } }', [_u((2, 4, 3, 3))]),
    case("Convolution", 'type: "Convolution" convolution_param { num_output: 2 kernel_size: 2 '
         'kernel_size: 1 kernel_size: 2 pad: 1 stride: 2 weight_filler { type: "xavier" } }',
         [_u((2, 2, 3, 2, 3))]),
    case("Crop", 'type: "Crop" crop_param { offset: 1 }', [_u((2, 3, 6, 5)), _u((2, 4, 4, 3))],
         down=[True, False]),
    case("Data", 'type: "Data" data_param {{ source: "{lmdb}" batch_size: 3 backend: LMDB }} '
         'transform_param {{ scale: 0.5 mirror: true crop_size: 3 }}', [], tops=2,
         host_io=True),
    case("Deconvolution", CONV.replace("Convolution", "Deconvolution"), [_u(X4)]),
    case("DepthwiseConvolution", 'type: "DepthwiseConvolution" convolution_param { '
         'num_output: 8 kernel_size: 2 weight_filler { type: "gaussian" std: 0.3 } }',
         [_u(X4)]),
    case("Dropout", 'type: "Dropout" dropout_param { dropout_ratio: 0.3 }', [_u((2, 3, 4, 5))]),
    case("DummyData", 'type: "DummyData" dummy_data_param { shape { dim: 2 dim: 3 } '
         'data_filler { type: "gaussian" } }', [], host_io=True),
    case("ELU", 'type: "ELU" elu_param { alpha: 0.7 }', [_u((2, 3, 4))]),
    case("Eltwise", 'type: "Eltwise" eltwise_param { operation: PROD }',
         [_u((2, 3)), _u((2, 3), 1), _u((2, 3), 2)]),
    case("Eltwise", 'type: "Eltwise" eltwise_param { coeff: 0.5 coeff: -2 }',
         [_u((2, 3)), _u((2, 3), 1)]),
    case("Eltwise", 'type: "Eltwise" eltwise_param { operation: MAX }',
         [_u((2, 3)), _u((2, 3), 1), _u((2, 3), 2)]),
    case("Embed", 'type: "Embed" embed_param { num_output: 3 input_dim: 5 '
         'weight_filler { type: "uniform" } bias_filler { type: "uniform" } }',
         [np.array([[0, 2, 4], [2, 2, 1]], np.float32)], down=[False]),
    case("EuclideanLoss", 'type: "EuclideanLoss"', [_u((3, 2, 4)), _u((3, 2, 4), 1)]),
    case("Exp", 'type: "Exp" exp_param { base: 2 scale: 0.5 shift: 0.1 }', [_u((2, 3, 4))]),
    case("Filter", 'type: "Filter"', [_u((4, 3)), _u((4, 2), 1),
                                      np.array([0, 1, 1, 0], np.float32)],
         down=[True, True, False], tops=2),
    case("Flatten", 'type: "Flatten"', [_u((2, 3, 4, 5))]),
    case("HDF5Data", 'type: "HDF5Data" top: "data" top: "label" hdf5_data_param {{ '
         'source: "{h5list}" batch_size: 3 }}', [], tops=2, host_io=True),
    case("HDF5Output", 'type: "HDF5Output" hdf5_output_param {{ file_name: "{h5out}" }}',
         [_u((2, 3, 4)), _labels(2, 3)], down=[False, False], tops=0, host_io=True),
    case("HingeLoss", 'type: "HingeLoss" hinge_loss_param { norm: L2 }',
         [_u((4, 5)), _labels(4, 5)], down=[True, False]),
    case("Im2col", 'type: "Im2col" convolution_param { kernel_size: 2 pad: 1 stride_h: 1 '
         'stride_w: 2 }', [_u((2, 2, 3, 4))]),
    case("ImageData", 'type: "ImageData" image_data_param {{ source: "{imglist}" '
         'root_folder: "{imgroot}" batch_size: 2 }}', [], tops=2, host_io=True),
    case("DenseImageData", 'type: "DenseImageData" dense_image_data_param {{ source: '
         '"{denselist}" root_folder: "{imgroot}" batch_size: 2 }}', [], tops=2, host_io=True),
    case("ImageSegData", 'type: "ImageSegData" image_data_param {{ source: "{denselist}" '
         'root_folder: "{imgroot}" batch_size: 2 label_type: PIXEL }} transform_param {{ '
         'crop_size: 22 mirror: true mean_value: 100 }}', [], tops=3, host_io=True),
    case("SegAccuracy", 'type: "SegAccuracy" seg_accuracy_param { ignore_label: 255 }',
         [_u((2, 3, 4, 5)), np.array([0, 1, 2, 255] * 10, np.float32).reshape(2, 1, 4, 5)],
         down=[False, False], host_io=True),
    case("MatWrite", 'type: "MatWrite" mat_write_param {{ prefix: "{_dir}/mat_" }}',
         [_u((2, 3, 4))], down=[False], tops=0, host_io=True),
    case("InfogainLoss", 'type: "InfogainLoss"',
         [_u((4, 3), 0, 0.05, 1.0), _labels(4, 3), _u((3, 3), 2, 0.0, 1.0)],
         down=[True, False, False]),
    case("InnerProduct", 'type: "InnerProduct" inner_product_param { num_output: 4 '
         'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         [_u((2, 3, 2, 2))]),
    case("InnerProduct", 'type: "InnerProduct" inner_product_param { num_output: 3 '
         'transpose: true axis: 2 weight_filler { type: "gaussian" } }', [_u((2, 2, 5))]),
    case("Input", 'type: "Input" input_param { shape { dim: 2 dim: 3 } }', [], host_io=True),
    case("Interp", 'type: "Interp" interp_param { zoom_factor: 2 pad_beg: -1 }', [_u(X4)]),
    case("Interp", 'type: "Interp" interp_param { height: 4 width: 9 }', [_u(X4)]),
    case("LRN", 'type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 1.5 }',
         [_u((2, 6, 3, 4))]),
    case("LRN", 'type: "LRN" lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL '
         'alpha: 0.8 }', [_u((2, 3, 4, 5))]),
    case("LSTM", 'type: "LSTM" recurrent_param { num_output: 4 weight_filler { type: '
         '"gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } }',
         [_u((3, 2, 3)), np.array([[0, 0], [1, 1], [1, 0]], np.float32)], down=[True, False]),
    case("LSTMUnit", 'type: "LSTMUnit"', [_u((1, 3, 4)), _u((1, 3, 16), 1),
                                          np.array([[1, 0, 1]], np.float32)],
         down=[True, True, False], tops=2),
    case("Log", 'type: "Log" log_param { shift: 2 scale: 0.5 }', [_u((2, 3, 4))]),
    case("MVN", 'type: "MVN" mvn_param { across_channels: true }', [_u((2, 3, 2, 2))]),
    case("MemoryData", 'type: "MemoryData" memory_data_param { batch_size: 2 channels: 1 '
         'height: 2 width: 2 }', [], tops=2, host_io=True, prepare=_memory_data),
    case("Mish", 'type: "Mish"', [_u((2, 3, 4))]),
    case("MultinomialLogisticLoss", 'type: "MultinomialLogisticLoss"',
         [_u((4, 3), 0, 0.05, 1.0), _labels(4, 3)], down=[True, False]),
    case("MVN", 'type: "MVN" mvn_param { normalize_variance: false }', [_u((2, 3, 2, 2))]),
    case("PReLU", 'type: "PReLU" prelu_param { filler { type: "uniform" } }', [_u((2, 3, 4))]),
    case("Parameter", 'type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } }', []),
    case("Pooling", 'type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 '
         'pad: 1 }', [_u(X4)], tops=2),
    case("Pooling", 'type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 }',
         [_u((2, 3, 6, 4))]),
    case("Pooling", 'type: "Pooling" pooling_param { pool: AVE kernel_h: 3 kernel_w: 2 '
         'stride: 2 pad_h: 1 pad_w: 1 }', [_u(X4)]),
    case("Pooling", 'type: "Pooling" pooling_param { pool: AVE global_pooling: true }',
         [_u(X4)]),
    case("Pooling", 'type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 3 '
         'stride: 2 }', [_u(X4, 0, 0.0, 1.0)]),
    case("Pooling", 'type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 3 '
         'stride: 2 }', [_u(X4, 0, 0.0, 1.0)], phase=TEST),
    case("Power", 'type: "Power" power_param { power: 2 scale: 0.5 shift: 1.5 }',
         [_u((2, 3, 4))]),
    case("Python", 'type: "Python" python_param {{ module: "{pymodule}" layer: "Scale2" }}',
         [_u((2, 3))], host_io=True),
    case("RNN", 'type: "RNN" recurrent_param { num_output: 3 weight_filler { type: '
         '"gaussian" std: 0.4 } bias_filler { type: "gaussian" std: 0.2 } }',
         [_u((3, 2, 3)), np.array([[0, 0], [1, 1], [1, 0]], np.float32)], down=[True, False]),
    case("ReLU", 'type: "ReLU" relu_param { negative_slope: 0.1 }', [_u((2, 3, 4, 5))]),
    case("ReLU6", 'type: "ReLU6"', [_u((2, 3, 4), 0, -8, 8)]),
    case("Reduction", 'type: "Reduction" reduction_param { operation: SUMSQ axis: 1 '
         'coeff: 0.5 }', [_u((2, 3, 4))]),
    case("Reduction", 'type: "Reduction" reduction_param { operation: ASUM }', [_u((2, 3, 4))]),
    case("Reduction", 'type: "Reduction" reduction_param { operation: MEAN axis: -1 }',
         [_u((2, 3, 4))]),
    case("Region", 'type: "Region" region_param { classes: 3 coords: 4 num: 2 softmax: true '
         'anchors: [1.08, 1.19, 3.42, 4.41] }', [_u((2, 16, 3, 2), 0, -3, 3)]),
    case("ROIPooling", 'type: "ROIPooling" roi_pooling_param { pooled_h: 3 pooled_w: 2 '
         'spatial_scale: 0.5 }',
         [_u((2, 3, 7, 8)), np.array([[0, 1, 1, 9, 11], [1, 0, 0, 15, 13], [1, 6, 4, 3, 2],
                                      [0, 12, 12, 30, 30]], np.float32)], down=[True, False]),
    case("Reshape", 'type: "Reshape" reshape_param { shape { dim: 0 dim: -1 dim: 2 } }',
         [_u((2, 3, 4))]),
    case("SPP", 'type: "SPP" spp_param { pyramid_height: 2 pool: MAX }', [_u((2, 3, 5, 4))]),
    case("SPP", 'type: "SPP" spp_param { pyramid_height: 2 pool: AVE }', [_u((2, 3, 5, 4))]),
    case("SPP", 'type: "SPP" spp_param { pyramid_height: 2 pool: STOCHASTIC }',
         [_u((2, 3, 4, 4), 0, 0.0, 1.0)]),
    case("Scale", 'type: "Scale" scale_param { axis: 1 num_axes: 1 bias_term: true '
         'filler { type: "uniform" } bias_filler { type: "uniform" } }', [_u((2, 3, 4))]),
    case("Scale", 'type: "Scale" scale_param { axis: 0 }', [_u((2, 3, 4)), _u((2, 3), 1)]),
    case("ShuffleChannel", 'type: "ShuffleChannel" shuffle_channel_param { group: 2 }',
         [_u(X4)]),
    case("Sigmoid", 'type: "Sigmoid"', [_u((2, 3, 4))]),
    case("SigmoidCrossEntropyLoss", 'type: "SigmoidCrossEntropyLoss" loss_param { '
         'ignore_label: -1 }', [_u((3, 4), 0, -3, 3),
                                np.array([[1, 0, -1, 1], [0, 0, 1, 1], [1, -1, 0, 1]],
                                         np.float32)], down=[True, False]),
    case("Silence", 'type: "Silence"', [_u((2, 3)), _u((4,), 1)], tops=0),
    case("Slice", 'type: "Slice" slice_param { axis: 1 slice_point: 1 slice_point: 3 }',
         [_u((2, 5, 2))], tops=3),
    case("Softmax", 'type: "Softmax" softmax_param { axis: 1 }', [_u((2, 5, 3), 0, -3, 3)]),
    case("SoftmaxWithLoss", 'type: "SoftmaxWithLoss"', [_u((6, 10), 0, -3, 3), _labels(6, 10)],
         down=[True, False]),
    case("SoftmaxWithLoss", 'type: "SoftmaxWithLoss" loss_param { ignore_label: 2 '
         'normalization: FULL } loss_weight: 0.5 loss_weight: 0',
         [_u((2, 4, 3, 2), 0, -3, 3), _labels(12, 4, 2, (2, 1, 3, 2))], down=[True, False],
         tops=2),
    case("Split", 'type: "Split"', [_u((2, 3))], tops=3),
    case("Swish", 'type: "Swish" swish_param { beta: 1.5 }', [_u((2, 3, 4))]),
    case("GELU", 'type: "GELU"', [_u((2, 3, 4), 0, -4, 4)]),
    case("TanH", 'type: "TanH"', [_u((2, 3, 4))]),
    case("Threshold", 'type: "Threshold" threshold_param { threshold: 0.2 }', [_u((2, 3, 4))],
         down=[False]),
    case("Tile", 'type: "Tile" tile_param { axis: 1 tiles: 3 }', [_u((2, 2, 3))]),
    case("Upsample", 'type: "Upsample" upsample_param { scale: 2 }', [_u((2, 3, 3, 2))]),
    case("WindowData", 'type: "WindowData" window_data_param {{ source: "{windows}" '
         'root_folder: "{winroot}" batch_size: 4 fg_fraction: 0.5 }} transform_param {{ '
         'crop_size: 8 mirror: true }}', [], tops=2, host_io=True),
    case("Yolo", 'type: "Yolo" yolo_param { classes: 2 num: 6 mask: 3 mask: 4 mask: 5 '
         'anchors: [10, 14, 23, 27, 37, 58, 81, 82, 135, 169, 344, 319] }',
         [_u((2, 21, 3, 4), 0, -3, 3)]),
    # SegNet/ENet, the YOLO ports, R-FCN and CTPN
    case("BN", 'type: "BN" bn_param { scale_filler { type: "uniform" } shift_filler { type: '
         '"uniform" } }', [_u((2, 3, 4, 2))]),
    case("BN", 'type: "BN" bn_param { bn_mode: INFERENCE scale_filler { type: "uniform" } '
         'shift_filler { type: "uniform" } }', [_u((2, 3, 2, 2))]),
    # PSPNet's BN: batch statistics and the running averages (TRAIN), the running ones (TEST)
    case("BN", 'type: "BN" bn_param { slope_filler { type: "uniform" } bias_filler { type: '
         '"uniform" } momentum: 0.8 }', [_u((2, 3, 4, 2))]),
    case("BN", 'type: "BN" bn_param { slope_filler { type: "uniform" } frozen: true }',
         [_u((2, 3, 2, 2))], phase=TEST),
    case("Upsample", 'type: "Upsample" upsample_param { upsample_h: 4 upsample_w: 5 }',
         [_u((1, 2, 2, 3)), np.array([[[[0, 3, 8], [11, 12, 19]], [[5, 7, 9], [10, 15, 18]]]],
                                     np.float32)], down=[True, False]),
    case("SoftmaxWithLoss", 'type: "SoftmaxWithLoss" loss_param { weight_by_label_freqs: '
         'true ignore_label: 2 class_weighting: [0.5, 2, 1, 4] }',
         [_u((2, 4, 3), 0, -3, 3), _labels(6, 4, 2, (2, 3))], down=[True, False]),
    case("Reorg", 'type: "Reorg" reorg_param { stride: 2 }', [_u((2, 8, 4, 2))]),
    case("Reorg", 'type: "Reorg" reorg_param { stride: 2 reverse: true }', [_u((2, 8, 2, 3))]),
    case("Reverse", 'type: "Reverse" reverse_param { axis: 1 }', [_u((2, 3, 4))]),
    case("Transpose", 'type: "Transpose" transpose_param { dim: 2 dim: 0 dim: 1 }',
         [_u((2, 3, 4))]),
    case("Lstm", 'type: "Lstm" lstm_param { num_output: 3 weight_filler { type: "uniform" } '
         'bias_filler { type: "uniform" } }', [_u((3, 2, 2))]),
    case("PSROIPooling", 'type: "PSROIPooling" psroi_pooling_param { spatial_scale: 0.5 '
         'output_dim: 2 group_size: 2 }',
         [_u((2, 8, 5, 6)), np.array([[0, 1, 1, 9, 7], [1, 0, 2, 11, 9], [1, 4, 4, 4, 4]],
                                     np.float32)], down=[True, False], host_io=True),
    case("Proposal", 'type: "Proposal" proposal_param { ratio: 0.5 ratio: 1 scale: 2 scale: 4 '
         'post_nms_topn: 20 }', [_u((1, 8, 3, 4), 0, 0, 1), _u((1, 16, 3, 4), 1, -0.3, 0.3),
                                 np.array([[50, 70, 1]], np.float32)],
         down=[False] * 3, tops=2, host_io=True),
    case("YoloDetectionOutput", 'type: "YoloDetectionOutput" yolo_detection_output_param { '
         'num_classes: 2 num_box: 2 confidence_threshold: 0.1 biases: [1, 1.5, 2, 2.5] }',
         [_u((1, 14, 3, 3), 0, -3, 3)], down=[False], host_io=True),
    case("Yolov3DetectionOutput", 'type: "Yolov3DetectionOutput" '
         'yolov3_detection_output_param { num_classes: 2 num_box: 1 confidence_threshold: 0.1 '
         'biases: [10, 14, 23, 27] mask: 1 mask: 0 anchors_scale: 32 anchors_scale: 16 '
         'mask_group_num: 2 }', [_u((1, 7, 2, 2), 0, -3, 3), _u((1, 7, 4, 4), 1, -3, 3)],
         down=[False, False], host_io=True),
    # the SSD fork's layers; the box post-processing ones work on the host, as the fork's do
    case("Normalize", 'type: "Normalize" norm_param { across_spatial: false channel_shared: '
         'false scale_filler { type: "uniform" min: 1 max: 3 } }', [_u((2, 3, 4, 2))]),
    case("Normalize", 'type: "Normalize"', [_u((2, 3, 2, 2))]),
    case("Permute", 'type: "Permute" permute_param { order: 0 order: 2 order: 3 order: 1 }',
         [_u((2, 3, 4, 5))]),
    case("PriorBox", 'type: "PriorBox" prior_box_param { min_size: 4 max_size: 9 '
         'aspect_ratio: 3 clip: true }', [_u((1, 2, 3, 4)), _u((1, 3, 12, 16))],
         down=[False, False]),
    case("DetectionOutput", 'type: "DetectionOutput" detection_output_param { num_classes: 3 '
         'nms_param { nms_threshold: 0.45 top_k: 10 } code_type: CENTER_SIZE keep_top_k: 5 '
         'confidence_threshold: 0.2 }', [_u((2, 64), 1, -0.5, 0.5), _ssd_probs(2),
                                          SSD_PRIORS], down=[False] * 3, host_io=True),
    case("MultiBoxLoss", 'type: "MultiBoxLoss" multibox_loss_param { num_classes: 3 '
         'code_type: CENTER_SIZE }', [_u((2, 64), 3), _u((2, 48), 4, -2, 2), SSD_PRIORS,
                                      SSD_GT], down=[True, True, False, False], host_io=True),
    case("DetectionEvaluate", 'type: "DetectionEvaluate" detection_evaluate_param { '
         'num_classes: 3 }', [np.array([[[[0, 1, 0.9, 0.1, 0.1, 0.6, 0.5], [0, 2, 0.8, 0, 0,
                                                                           0.2, 0.2],
                                          [1, 1, 0.7, 0.2, 0.3, 0.7, 0.8]]]], np.float32),
                              SSD_GT], down=[False, False], host_io=True),
    case("SmoothL1Loss", 'type: "SmoothL1Loss" smooth_l1_loss_param { sigma: 2 }',
         [_u((2, 4, 2, 2), 1, -2, 2), _u((2, 4, 2, 2), 2, -2, 2), _u((2, 4, 2, 2), 3, 0, 1),
          _u((2, 4, 2, 2), 4, 0, 1)], down=[True, True, False, False]),
    case("EvalDetection", 'type: "EvalDetection" eval_detection_param { side: 2 num_class: 2 '
         'num_object: 2 nms: 0.45 biases: 1 biases: 1 biases: 2 biases: 2 }',
         [_u((1, 14, 2, 2), 5, -3, 3), np.array([[[[0, 1, 0, 0.1, 0.1, 0.6, 0.5, 0],
                                                  [0, 2, 0, 0.5, 0.5, 0.9, 0.9, 0]]]],
                                                np.float32)],
         down=[False, False], host_io=True),
    case("BatchNorm", 'type: "BatchNorm" batch_norm_param { scale_bias: true '
         'bias_filler { type: "constant" value: 0.5 } }', [_u((2, 3, 2, 2), 6)]),
    # Intel Caffe's statistics per sub-batch
    case("BatchNorm", 'type: "BatchNorm" batch_norm_param { stats_batch_size: 2 }',
         [_u((6, 3, 2, 2), 7)]),
]

SOURCE_TYPES = ("AnnotatedData", "Data", "DenseImageData", "HDF5Data", "HDF5Output", "ImageData",
                "ImageSegData", "MatWrite", "WindowData",
                "Python")

# Registered types that are not run here, with the reason.
EXCLUDED = {"DenseCRF": "not supported: a net with it is refused when it is built"}



# ---- sources for the data layers ---------------------------------------------------------------
USER_LAYER = '''
import pycaffe_lite as caffe


class Scale2(caffe.Layer):
    """pycaffe style: works on the host arrays blob.data / blob.diff."""

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = 2 * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = 2 * top[0].diff
'''


def make_sources(root):
    """Files for the data layers' cases under ``root`` (a pathlib.Path); returns the dict the
    case texts are formatted with (``_dir`` is where the Python layer's module is)."""
    import h5py
    import lmdb
    from PIL import Image

    rng = _rng(3)
    out = {}
    env = lmdb.open(str(root / "db"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(7):
            img = rng.integers(0, 256, (2, 4, 5), dtype=np.uint8)
            datum = caffe_pb2.Datum(channels=2, height=4, width=5, data=img.tobytes(), label=i)
            txn.put(b"%08d" % i, datum.SerializeToString())
    env.close()
    out["lmdb"] = str(root / "db")
    env = lmdb.open(str(root / "annodb"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(4):
            anno = caffe_pb2.AnnotatedDatum(type=caffe_pb2.AnnotatedDatum.BBOX)
            anno.datum.CopyFrom(caffe_pb2.Datum(channels=3, height=8, width=10, data=rng.integers(
                0, 256, (3, 8, 10), dtype=np.uint8).tobytes()))
            box = anno.annotation_group.add(group_label=1 + i % 2).annotation.add().bbox
            box.xmin, box.ymin, box.xmax, box.ymax = 0.1 * i, 0.2, 0.5 + 0.1 * i, 0.9
            txn.put(b"%08d" % i, anno.SerializeToString())
    env.close()
    out["annolmdb"] = str(root / "annodb")
    with h5py.File(root / "part.h5", "w") as f:
        f["data"] = rng.normal(size=(5, 2, 3)).astype(np.float32)
        f["label"] = np.arange(5, dtype=np.float32)
    (root / "h5list.txt").write_text(str(root / "part.h5") + "\n")
    out["h5list"] = str(root / "h5list.txt")
    out["h5out"] = str(root / "out_%s.h5")
    imgroot = root / "imgs"
    imgroot.mkdir()
    rgbs = rng.integers(0, 256, (3, 20, 24, 3), dtype=np.uint8)
    for i, rgb in enumerate(rgbs):
        Image.fromarray(rgb).save(imgroot / ("im%d.png" % i))
    (root / "imglist.txt").write_text("".join("im%d.png %d\n" % (i, i) for i in range(3)))
    out["imglist"], out["imgroot"] = str(root / "imglist.txt"), str(imgroot) + "/"
    (root / "denselist.txt").write_text("im0.png im1.png\nim2.png im0.png\n")
    out["denselist"] = str(root / "denselist.txt")
    lines = []
    for i, wins in enumerate([[(3, 0.9, 2, 3, 13, 10)], [(5, 0.1, 10, 4, 21, 17)]]):
        lines += ["# %d" % i, "im%d.png" % i, "3", "20", "24", str(len(wins))]
        lines += [" ".join(str(v) for v in w) for w in wins]
    (root / "windows.txt").write_text("\n".join(lines) + "\n")
    out["windows"], out["winroot"] = str(root / "windows.txt"), str(imgroot) + "/"
    (root / "pcl_gpu_user_layer.py").write_text(textwrap.dedent(USER_LAYER))
    out["pymodule"] = "pcl_gpu_user_layer"
    out["_dir"] = str(root)
    return out




# ---- running a case ------------------------------------------------------------------------------
def _blob(arr):
    b = Blob(arr.shape, np.float32)
    b.data[...] = arr
    return b


@contextlib.contextmanager
def host_draws():
    """``backend.random_uniform`` draws on the host in both modes (uploading in GPU mode).

    GPU mode draws dropout masks and stochastic pooling choices on the device, from another
    stream than the host's, so a CPU and a GPU run disagree there by design; with the host's
    draws both modes compute on the same numbers and the layers' arithmetic can be compared.
    The device draws themselves are tested in tests/test_gpu_random.py."""
    draw = backend.random_uniform

    def on_the_host(shape, dtype, xp):
        values = draw(shape, dtype, np)
        return values if xp is np else xp.asarray(values)

    with mock.patch.object(backend, "random_uniform", on_the_host):
        yield


def run_case(c, sources, gpu, forbid=None, tag="cpu"):
    """Forward + backward of case ``c`` in CPU or GPU mode (the device module installed),
    random numbers drawn on the host (:func:`host_draws`); returns (tops' data, bottoms'
    diffs, params' (data, diff), tops' data states after forward, None for a top sharing a
    bottom's or param's storage). ``forbid()``: a context manager wrapped around forward and
    backward (not for ``host_io`` cases)."""
    src = dict(sources)
    src["h5out"] = sources["h5out"] % tag
    text = c.text.format(**src) if c.type in SOURCE_TYPES else c.text
    backend.set_random_seed(11)
    backend.set_mode_gpu() if gpu else backend.set_mode_cpu()
    layer = create_layer(layer_param(text, c.phase), dtype=np.float32)
    bottom = [_blob(a) for a in c.bottoms]
    top = [Blob((), np.float32) for _ in range(c.tops)]
    if layer.auto_top_blobs:
        while len(top) < layer.needed_num_top_blobs():
            top.append(Blob((), np.float32))
    guard = forbid if forbid is not None and gpu and not c.host_io else _nothing
    try:
        layer.SetUp(bottom, top)
        if c.prepare is not None:
            c.prepare(layer)
        with guard(), host_draws():
            layer.Forward(bottom, top)
        # a top that shares a bottom's or a param's storage (Split, Reshape, Parameter) is
        # not computed: its state is its source's
        sources_ = {id(b._data) for b in bottom} | {id(p._data) for p in layer.blobs}
        states = [None if id(t._data) in sources_ else t.data_state for t in top]
        rng = _rng(5)
        for i, t in enumerate(top):
            if not layer.loss(i):
                t.diff[...] = rng.uniform(-1, 1, t.shape)
        down = list(c.down) if c.down is not None else [True] * len(bottom)
        with guard():
            layer.Backward(top, down, bottom)
        tops = [t.data.copy() for t in top]
        diffs = [b.diff.copy() if d else None for b, d in zip(bottom, down)]
        params = [(p.data.copy(), p.diff.copy()) for p in layer.blobs]
    finally:
        close = getattr(layer, "close", None)
        if close is not None:
            close()
        backend.set_mode_cpu()
    return tops, diffs, params, states


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def case_ids():
    seen = collections.Counter()
    ids = []
    for c in CASES:
        ids.append("%s-%d" % (c.type, seen[c.type]))
        seen[c.type] += 1
    return ids




# ---- a short LeNet-style training run ----------------------------------------------------------
LENET = """
name: "lenet_small"
layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 8 channels: 1 height: 12 width: 12 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3
          weight_filler { type: "xavier" } bias_filler { type: "constant" value: 0.1 } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 6 kernel_size: 2
          weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
        inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""

SOLVERS = {
    "SGD": 'type: "SGD" base_lr: 0.05 momentum: 0.9 weight_decay: 0.0005 lr_policy: "inv" '
           'gamma: 0.0001 power: 0.75',
    "Adam": 'type: "Adam" base_lr: 0.01 momentum: 0.9 momentum2: 0.999 delta: 1e-8 '
            'lr_policy: "fixed" regularization_type: "L1" weight_decay: 0.001',
}
STEPS = 4


def make_solver(kind, tmp_path):
    from google.protobuf import text_format

    from pycaffe_lite.solvers import get_solver

    param = caffe_pb2.SolverParameter()
    text_format.Merge(SOLVERS[kind] + ' random_seed: 3 max_iter: 100 display: 0 '
                      'snapshot_after_train: false snapshot_prefix: "%s"'
                      % (tmp_path / kind.lower()), param)
    text_format.Merge(LENET, param.net_param)
    solver = get_solver(param)
    data = _u((32, 1, 12, 12), 9, 0.0, 1.0)
    labels = _labels(32, 10, 8)
    solver.net.set_input_arrays(data, labels)
    return solver


def weights(net):
    return [p.data.copy() for p in net.learnable_params]


