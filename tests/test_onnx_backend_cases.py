"""ONNX's own conformance cases (the node cases of ``onnx.backend.test.case.node`` and the
models under ``onnx/backend/test/data`` in the installed package) through ``to_caffe``: each
case either converts and our Net gives ONNX's expected outputs (computed by ONNX's NumPy
reference), or is refused at import with an error naming the node, its op and what does not
convert. The cases' inputs that the importer needs as constants (weights, scales, axes, ...)
are given as initializers of the case's values; every other input is fed to the Net."""

import functools
import glob
import os
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is a test dependency")
from onnx import numpy_helper  # noqa: E402

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import onnx as caffe_onnx  # noqa: E402
from pycaffe_lite.errors import CaffeError  # noqa: E402

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
RTOL, ATOL = 1e-5, 1e-4


@functools.lru_cache(maxsize=None)
def _node_cases():
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():  # some cases' generators overflow casts on purpose
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def node_case(name):
    """(model, inputs, expected outputs) of one of ONNX's node cases."""
    case = _node_cases()[name]
    inputs, outputs = case.data_sets[0]
    return case.model, list(inputs), list(outputs)


def _tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def data_case(name):
    """(model, inputs, expected outputs) of a model case under the package's data folder:
    ``pytorch-converted/NAME`` etc. (test_data_set_0), or ``light/NAME`` (the zoo nets of
    constant-of-shape weights, fed ``arange(n) / n`` as ONNX's runner feeds them)."""
    kind, base = name.split("/")
    if kind == "light":
        model = onnx.load(os.path.join(DATA, "light", "light_%s.onnx" % base))
        inits = {i.name for i in model.graph.initializer}
        x = [v for v in model.graph.input if v.name not in inits][0]
        shape = tuple(d.dim_value or 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        inputs = [(np.arange(n).reshape(shape) / n).astype(np.float32)]
        return model, inputs, [_tensor(os.path.join(DATA, "light", "light_%s_output_0.pb"
                                                    % base))]
    folder = os.path.join(DATA, kind, base)
    model = onnx.load(os.path.join(folder, "model.onnx"))

    def load(pattern):
        files = glob.glob(os.path.join(folder, "test_data_set_0", pattern))
        return [_tensor(f) for f in sorted(files, key=lambda p: int(re.findall(r"\d+", p)[-1]))]
    return model, load("input_*.pb"), load("output_*.pb")


def freeze(model, inputs, names):
    """The model with the graph inputs ``names`` made initializers of the case's values, and
    the inputs left to feed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name for i in m.graph.initializer}
    graph_inputs = [v for v in m.graph.input if v.name not in inits]
    values = {v.name: np.asarray(x) for v, x in zip(graph_inputs, inputs)}
    unknown = set(names) - set(values)
    assert not unknown, "not graph inputs: %s" % sorted(unknown)
    kept = [v for v in m.graph.input if v.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(kept)
    for name in names:
        m.graph.initializer.append(numpy_helper.from_array(values[name], name))
    return m, [(v.name, values[v.name]) for v in kept if v.name in values]


def convert(model, inputs, frozen, tmp_path, key):
    """The case converted (``frozen`` inputs as initializers, the others' shapes given) and
    loaded as a TEST Net; returns (net, feed, the ONNX outputs' blobs)."""
    m, feed = freeze(model, inputs, frozen)
    prefix = str(tmp_path / key)
    _, _, outputs = caffe_onnx.to_caffe(m, prefix,
                                         input_shapes={n: x.shape for n, x in feed})
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    return net, feed, [outputs[o.name] for o in m.graph.output]


def check_match(model, inputs, expected, frozen, tmp_path, key, rtol=RTOL, atol=ATOL):
    net, feed, blobs = convert(model, inputs, frozen, tmp_path, key)
    net.forward(**{n: x.astype(np.float32) for n, x in feed})
    for blob, want in zip(blobs, expected):
        got = net.blobs[blob].data
        want = np.asarray(want, dtype=np.float32)
        assert got.shape == want.shape, (key, blob, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=key)


def check_refused(model, inputs, frozen, pattern):
    m, feed = freeze(model, inputs, frozen)
    with pytest.raises(CaffeError, match=pattern):
        caffe_onnx.to_caffe(m, None, input_shapes={n: x.shape for n, x in feed})


# -- the defects these cases found ------------------------------------------------------------
@pytest.mark.slow   # three zoo nets, about 5 s
def test_zoo_nets_whose_dropout_names_an_unread_mask(tmp_path):
    # the model zoo's SqueezeNet (as alexnet and vgg19) names the mask output of its Dropout
    # (opset 3..6) and reads it nowhere: nothing to convert, the Dropout is the identity
    model, inputs, expected = data_case("light/squeezenet")
    assert any(len(n.output) > 1 for n in model.graph.node if n.op_type == "Dropout")
    check_match(model, inputs, expected, [], tmp_path, "squeezenet")
    # a mask that is read (here a graph output) is still refused, naming it
    model, inputs, _ = node_case("test_dropout_default_mask")
    check_refused(model, inputs, [], r"ONNX node 'y' \(op Dropout\): its mask output 'z' is "
                                     r"read, and the dropout mask has no Caffe equivalent")


def test_align_corners_resize_by_scales_of_fractional_lengths_is_refused(tmp_path):
    # ONNX's align_corners maps x to x (in - 1) / (in * scale - 1): scales of 0.6 on 2 x 4
    # give lengths 1.2 and 2.4, sampled so (ONNX's output [1, 3.142857]); Caffe's Interp
    # samples by the rounded sizes (it gave [1, 4])
    model, inputs, _ = node_case("test_resize_downsample_scales_linear_align_corners")
    check_refused(model, inputs, ["scales"],
                  r"ONNX node 'Y' \(op Resize\): scales \[0\.6.*, 0\.6.*\] give the fractional "
                  r"output lengths \[1\.2.*, 2\.4.*\], which align_corners samples by")
    # scales of whole lengths convert: ONNX's upsampling case
    model, inputs, expected = node_case("test_resize_upsample_scales_linear_align_corners")
    check_match(model, inputs, expected, ["scales"], tmp_path, "up_align")


def test_flatten_of_a_one_axis_input(tmp_path):
    # x.view(1, -1) of a 1-D tensor, exported as Flatten(axis=1): ONNX gives (n, 1); Caffe's
    # Flatten layer refused the net ("axis 1 / end_axis -1 out of range for a bottom of
    # shape (1,)") once imported
    model, inputs, expected = data_case("pytorch-operator/test_operator_view")
    assert inputs[0].ndim == 1
    check_match(model, inputs, expected, [], tmp_path, "view")


def test_empty_tensors_are_refused_at_import():
    # a Caffe blob cannot be empty: an input of size 0 was read as size 1 (the Reshape to
    # (3, 4, 0) with allowzero then failed in the Net), a Split into a piece of size 0
    # of an empty input imported and failed in the Net ("cannot slice axis 0 of size 1 into
    # 3 tops")
    model, inputs, _ = node_case("test_reshape_allowzero_reordered")
    check_refused(model, inputs, ["shape"], r"ONNX input 'data' has an axis of size 0 "
                                             r"\(shape \[0, 3, 4\]\); a Caffe blob cannot be "
                                             r"empty")
    for name in ("test_split_zero_size_splits_opset13", "test_split_zero_size_splits_opset18"):
        model, inputs, _ = node_case(name)
        check_refused(model, inputs, ["split"], r"ONNX input 'input' has an axis of size 0")
    # an empty piece of a Split of a non-empty input (opset 18 allows sizes of 0)
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], name="split", axis=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abc"],
        initializer=[numpy_helper.from_array(np.array([2, 0, 1], np.int64), "sizes")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(CaffeError, match=r"ONNX node 'split' \(op Split\): its output 'b' "
                                         r"has an axis of size 0 \(shape \(1, 0\)\); a Caffe "
                                         r"blob cannot be empty"):
        caffe_onnx.to_caffe(m, None)


def test_gemm_whose_shape_onnx_does_not_infer(tmp_path):
    # torch's addmm at opset 6 (Gemm with `broadcast`): ONNX's shape inference leaves the first
    # Gemm's output without a shape, and the second Gemm, which adds it as C, was refused
    # ("the shape of '3' is unknown")
    model, inputs, expected = data_case("pytorch-operator/test_operator_addmm")
    check_match(model, inputs, expected, ["1"], tmp_path, "addmm")


def test_clip_of_min_above_max_is_refused_at_import():
    # it imported as a Clip layer that the Net then refused (clip_param.min (2) must not be
    # greater than clip_param.max (1))
    model, inputs, _ = node_case("test_clip_min_greater_than_max")
    check_refused(model, inputs, ["min", "max"], r"ONNX node 'y' \(op Clip\): min 2 is greater "
                                                 r"than max 1 \(ONNX then gives max everywhere")


def test_integer_and_non_tensor_inputs_are_refused():
    # a uint8 Sub wraps in ONNX (1 - 2 = 255); fed to Caffe as floats it gave -1 silently
    # (ONNX's own case happens to stay in range, so it matched)
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "y"], ["z"], name="sub")], "g",
        [helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 2]) for n in "xy"],
        [helper.make_tensor_value_info("z", TensorProto.UINT8, [1, 2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    x, y = np.array([[1, 5]], np.uint8), np.array([[2, 3]], np.uint8)
    assert ReferenceEvaluator(m).run(None, {"x": x, "y": y})[0].tolist() == [[255, 2]]
    with pytest.raises(CaffeError, match=r"ONNX input 'x' is of type uint8; a Caffe blob "
                                         r"holds floats"):
        caffe_onnx.to_caffe(m, None)
    # (a Max of int64, compared and not computed, converts: the table's test_max_int64; so do
    # the Add and Mul of 32- and 64-bit integers, test_mul_uint64, exact below 2^24)
    for name in ("test_sub_uint8", "test_add_int8", "test_mul_uint16", "test_sub_uint64"):
        model, inputs, _ = node_case(name)
        check_refused(model, inputs, [], r"ONNX input '\w+' is of type u?int(8|16|64); .* "
                                         r"computes with it \((u?int(8|16) arithmetic wraps|an "
                                         r"unsigned difference wraps below 0)")
    # a sequence: not a tensor (it was 'input_shapes['x'] has 5 axes; the ONNX input has 0')
    model, _, _ = node_case("test_identity_sequence")
    with pytest.raises(CaffeError, match=r"ONNX input 'x' is of type none \(not a tensor\)"):
        caffe_onnx.to_caffe(model, None)


@pytest.mark.parametrize("name", ["test_shape_start_1", "test_shape_end_negative_1",
                                  "test_shape_clip_start", "test_shape_start_greater_than_end"])
def test_shape_with_start_and_end_folds(tmp_path, name):
    # Shape of a static shape with opset 15's start / end folds to ONNX's dims (it was left
    # unfolded: 'this op has no Caffe equivalent'); a Reshape of a second input to them then
    # converts
    from onnx import TensorProto, helper
    model, inputs, expected = node_case(name)
    dims = [int(d) for d in expected[0]]
    node = model.graph.node[0]
    graph = helper.make_graph(
        [node, helper.make_node("Concat", ["one", node.output[0]], ["target"], axis=0),
         helper.make_node("Reshape", ["z", "target"], ["out"], name="reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(inputs[0].shape)),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1] + dims)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "one")])
    m = helper.make_model(graph, opset_imports=model.opset_import)
    z = np.random.default_rng(0).normal(size=[1] + dims).astype(np.float32)
    check_match(m, [inputs[0], z], [z], [], tmp_path, name)


@pytest.mark.parametrize("name,frozen", [("test_conv_with_autopad_same", ["W"]),
                                         ("test_maxpool_2d_same_lower", []),
                                         ("test_maxpool_2d_precomputed_same_upper", [])])
def test_auto_pad_same_of_even_pads(tmp_path, name, frozen):
    # SAME_UPPER / SAME_LOWER on a static input: the pads they give, where Caffe can take
    # them (these were refused: 'auto_pad SAME_LOWER has no Caffe equivalent')
    model, inputs, expected = node_case(name)
    check_match(model, inputs, expected, frozen, tmp_path, name)


def test_auto_pad_same_of_uneven_pads_is_refused():
    # uneven pads convert as the pool of even pads, its extra windows sliced off (the table's
    # test_maxpool_2d_same_upper, light/inception_v1), but not for an average that counts the
    # padding: ONNX counts one pad, the even pool two
    model, inputs, _ = node_case("test_averagepool_2d_same_upper")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.node[0].attribute.append(onnx.helper.make_attribute("count_include_pad", 1))
    check_refused(m, inputs, [], r"ONNX node 'y' \(op AveragePool\): ONNX pools \[32, 32\] "
                                 r"windows where Caffe's rounding gives \[31, 31\]")
    model, inputs, _ = node_case("test_conv_with_autopad_same")
    m, _ = freeze(model, inputs, ["W"])
    m.graph.node[0].attribute[0].s = b"SAME_UPPER"
    w = numpy_helper.to_array(m.graph.initializer[0])
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w[:, :, :2, :2].copy(), "W"))
    for att in m.graph.node[0].attribute:
        if att.name == "kernel_shape":
            att.ints[:] = [2, 2]
        if att.name == "strides":
            att.ints[:] = [1, 1]
    with pytest.raises(CaffeError, match=r"ONNX node 'y' \(op Conv\): asymmetric pads "
                                         r"\[0, 0, 1, 1\] have no Caffe equivalent"):
        caffe_onnx.to_caffe(m, None)


# -- every case whose ops the importer has (the node cases and the data folder's, but for a
# sequence or optional input; light/vgg19 and light/zfnet512, AlexNet's kind, are left out for
# time, and pytorch-operator/test_operator_addconstant, whose float64 input is uninitialised
# memory far beyond float32's range) and what each must give: ONNX's outputs, or a refusal
# whose message matches
MATCH = '''
test_abs test_add test_averagepool_2d_precomputed_pads_count_include_pad
test_averagepool_2d_precomputed_strides test_averagepool_2d_default
test_averagepool_2d_pads_count_include_pad test_averagepool_2d_strides test_averagepool_2d_ceil
test_averagepool_2d_ceil_last_window_starts_on_pad test_averagepool_2d_precomputed_pads
test_averagepool_2d_precomputed_same_upper test_averagepool_2d_same_lower
test_averagepool_2d_pads test_batchnorm_example
test_batchnorm_epsilon test_causal_conv_with_state_with_past_state_expanded
test_causal_conv_with_state_decode_step_expanded
test_causal_conv_with_state_with_bias_and_past_state_expanded test_clip_example test_clip
test_clip_inbounds test_clip_outbounds test_clip_splitbounds test_clip_default_min
test_clip_default_max test_clip_default_inbounds test_clip_default_inbounds_expanded
test_concat_1d_axis_0 test_concat_1d_axis_negative_1 test_concat_2d_axis_0
test_concat_2d_axis_1 test_concat_2d_axis_negative_2 test_concat_2d_axis_negative_1
test_concat_3d_axis_0 test_concat_3d_axis_1 test_concat_3d_axis_2
test_concat_3d_axis_negative_3 test_concat_3d_axis_negative_2 test_concat_3d_axis_negative_1
test_basic_conv_with_padding test_basic_conv_without_padding test_conv_with_strides_padding
test_conv_with_strides_no_padding test_conv_with_strides_and_asymmetric_padding
test_conv_with_autopad_same test_convtranspose test_convtranspose_1d test_convtranspose_3d
test_convtranspose_pads test_convtranspose_dilations test_convtranspose_group_2
test_convtranspose_output_shape test_convtranspose_pad test_convtranspose_kernel_shape
test_convtranspose_autopad_same
test_convtranspose_group_2_image_3 test_depthtospace_example_expanded
test_depthtospace_crd_mode_example_expanded test_dropout_default test_dropout_default_ratio
test_dropout_default_old test_dropout_random_old test_elu_example test_elu test_elu_default
test_exp_example test_exp test_flatten_axis0 test_flatten_axis1 test_flatten_axis2
test_flatten_axis3 test_flatten_default_axis test_flatten_negative_axis4
test_flatten_negative_axis3 test_flatten_negative_axis2 test_flatten_negative_axis1
test_gather_0 test_gather_1 test_gather_2d_indices test_gather_negative_indices
test_gemm_default_zero_bias test_gemm_default_no_bias test_gemm_default_scalar_bias
test_gemm_default_single_elem_vector_bias test_gemm_default_vector_bias test_gemm_transposeB
test_gemm_alpha test_gemm_beta test_globalaveragepool test_globalaveragepool_precomputed
test_globalmaxpool test_globalmaxpool_precomputed test_hardsigmoid_example test_hardsigmoid
test_hardsigmoid_default test_hardswish test_hardswish_expanded test_identity
test_leakyrelu_example test_leakyrelu test_leakyrelu_default test_log_example test_log test_lrn
test_lrn_default test_max_example test_max_one_input test_max_two_inputs test_max_float16
test_max_float32 test_max_float64 test_maxpool_2d_precomputed_pads
test_maxpool_2d_precomputed_strides test_maxpool_2d_precomputed_same_upper
test_maxpool_2d_default test_maxpool_2d_same_lower test_maxpool_2d_pads test_maxpool_2d_strides
test_maxpool_2d_ceil test_maxpool_2d_ceil_output_size_reduce_by_one test_mish
test_mish_expanded test_mul_example test_mul test_mul_bcast
test_reduce_mean_default_axes_keepdims_example test_reduce_mean_default_axes_keepdims_random
test_relu test_reshape_reordered_all_dims test_reshape_reordered_last_dims
test_reshape_reduced_dims test_reshape_extended_dims test_reshape_one_dim
test_reshape_negative_dim test_reshape_negative_extended_dims test_reshape_zero_dim
test_reshape_zero_and_negative_dim test_resize_upsample_scales_nearest
test_resize_upsample_scales_linear test_resize_upsample_scales_linear_align_corners
test_resize_upsample_scales_nearest_axes_2_3 test_resize_upsample_scales_nearest_axes_3_2
test_sigmoid_example test_sigmoid test_slice test_slice_neg test_slice_end_out_of_bounds
test_slice_default_axes test_slice_default_steps test_slice_negative_axes test_softmax_example
test_slice_neg_steps
test_softmax_large_number test_softmax_axis_0 test_softmax_axis_1 test_softmax_axis_2
test_softmax_negative_axis test_softmax_default_axis test_softplus_example test_softplus
test_spacetodepth_expanded test_spacetodepth_example_expanded
test_spacetodepth_dcr_mode_example_expanded test_spacetodepth_crd_mode_example_expanded
test_split_equal_parts_1d_opset13 test_split_variable_parts_1d_opset13
test_split_equal_parts_2d_opset13 test_split_variable_parts_2d_opset13
test_split_equal_parts_default_axis_opset13 test_split_variable_parts_default_axis_opset13
test_split_equal_parts_1d_opset18 test_split_variable_parts_1d_opset18
test_split_equal_parts_2d test_split_variable_parts_2d_opset18
test_split_equal_parts_default_axis_opset18 test_split_variable_parts_default_axis_opset18
test_split_1d_uneven_split_opset18 test_split_2d_uneven_split_opset18 test_squeeze
test_squeeze_negative_axes test_sub_example test_sub test_sum_example test_sum_one_input
test_sum_two_inputs test_tanh_example test_tanh test_transpose_default
test_transpose_all_permutations_0 test_transpose_all_permutations_1
test_transpose_all_permutations_2 test_transpose_all_permutations_3
test_transpose_all_permutations_4 test_transpose_all_permutations_5 test_unsqueeze_axis_0
test_unsqueeze_axis_1 test_unsqueeze_axis_2 test_unsqueeze_two_axes test_unsqueeze_three_axes
test_unsqueeze_unsorted_axes test_unsqueeze_negative_axes test_upsample_nearest
pytorch-converted/test_AvgPool1d pytorch-converted/test_AvgPool1d_stride
pytorch-converted/test_AvgPool2d pytorch-converted/test_AvgPool2d_stride
pytorch-converted/test_BatchNorm1d_3d_input_eval pytorch-converted/test_BatchNorm2d_eval
pytorch-converted/test_BatchNorm2d_momentum_eval pytorch-converted/test_BatchNorm3d_eval
pytorch-converted/test_BatchNorm3d_momentum_eval pytorch-converted/test_Conv1d
pytorch-converted/test_Conv1d_dilated pytorch-converted/test_Conv1d_groups
pytorch-converted/test_Conv1d_pad1 pytorch-converted/test_Conv1d_pad1size1
pytorch-converted/test_Conv1d_pad2 pytorch-converted/test_Conv1d_pad2size1
pytorch-converted/test_Conv1d_stride pytorch-converted/test_Conv2d
pytorch-converted/test_Conv2d_depthwise pytorch-converted/test_Conv2d_depthwise_padded
pytorch-converted/test_Conv2d_depthwise_strided
pytorch-converted/test_Conv2d_depthwise_with_multiplier pytorch-converted/test_Conv2d_dilated
pytorch-converted/test_Conv2d_groups pytorch-converted/test_Conv2d_groups_thnn
pytorch-converted/test_Conv2d_no_bias pytorch-converted/test_Conv2d_padding
pytorch-converted/test_Conv2d_strided pytorch-converted/test_Conv3d
pytorch-converted/test_Conv3d_dilated pytorch-converted/test_Conv3d_dilated_strided
pytorch-converted/test_Conv3d_groups pytorch-converted/test_Conv3d_no_bias
pytorch-converted/test_Conv3d_stride pytorch-converted/test_Conv3d_stride_padding
pytorch-converted/test_ConvTranspose2d pytorch-converted/test_ConvTranspose2d_no_bias
pytorch-converted/test_ELU pytorch-converted/test_GLU pytorch-converted/test_GLU_dim
pytorch-converted/test_LeakyReLU pytorch-converted/test_LeakyReLU_with_negval
pytorch-converted/test_Linear pytorch-converted/test_Linear_no_bias
pytorch-converted/test_MaxPool2d pytorch-converted/test_PReLU_1d
pytorch-converted/test_PReLU_2d pytorch-converted/test_PReLU_3d
pytorch-converted/test_PixelShuffle pytorch-converted/test_PoissonNLLLLoss_no_reduce
pytorch-converted/test_ReLU pytorch-converted/test_Sigmoid pytorch-converted/test_Softmax
pytorch-converted/test_Softplus pytorch-converted/test_Tanh
pytorch-converted/test_softmax_functional_dim3 pytorch-converted/test_softmax_lastdim
pytorch-operator/test_operator_chunk
pytorch-operator/test_operator_clip pytorch-operator/test_operator_concat2
pytorch-operator/test_operator_conv pytorch-operator/test_operator_convtranspose
pytorch-operator/test_operator_exp
pytorch-operator/test_operator_flatten pytorch-operator/test_operator_index
pytorch-operator/test_operator_max pytorch-operator/test_operator_mm
pytorch-operator/test_operator_permute2 pytorch-operator/test_operator_view
simple/test_single_relu_model light/bvlc_alexnet light/densenet121 light/resnet50
light/squeezenet light/inception_v2 light/shufflenet
test_expand_dim_changed test_expand_dim_unchanged test_instancenorm_example
test_instancenorm_epsilon test_logsoftmax_example_1 test_logsoftmax_large_number
test_logsoftmax_axis_0 test_logsoftmax_axis_1 test_logsoftmax_axis_2
test_logsoftmax_negative_axis test_logsoftmax_default_axis test_mean_example
test_mean_one_input test_mean_two_inputs test_min_example test_min_one_input
test_min_two_inputs test_min_float16 test_min_float32 test_min_float64 test_neg_example
test_neg test_pow_bcast_scalar test_reciprocal_example test_reciprocal
test_reduce_log_sum_desc_axes_expanded test_reduce_log_sum_asc_axes_expanded
test_reduce_log_sum_default_expanded test_reduce_log_sum_negative_axes_expanded
test_reduce_l1_do_not_keepdims_example test_reduce_l1_do_not_keepdims_example_expanded
test_reduce_l1_do_not_keepdims_random test_reduce_l1_do_not_keepdims_random_expanded
test_reduce_l1_keep_dims_example test_reduce_l1_keep_dims_example_expanded
test_reduce_l1_keep_dims_random test_reduce_l1_keep_dims_random_expanded
test_reduce_l1_default_axes_keepdims_example
test_reduce_l1_default_axes_keepdims_example_expanded
test_reduce_l1_default_axes_keepdims_random
test_reduce_l1_default_axes_keepdims_random_expanded
test_reduce_l1_negative_axes_keep_dims_example
test_reduce_l1_negative_axes_keep_dims_example_expanded
test_reduce_l1_negative_axes_keep_dims_random
test_reduce_l1_negative_axes_keep_dims_random_expanded test_reduce_l2_do_not_keepdims_example
test_reduce_l2_do_not_keepdims_random test_reduce_l2_keep_dims_example
test_reduce_l2_keep_dims_random test_reduce_l2_default_axes_keepdims_example
test_reduce_l2_default_axes_keepdims_random test_reduce_l2_negative_axes_keep_dims_example
test_reduce_l2_negative_axes_keep_dims_random test_reduce_sum_do_not_keepdims_example
test_reduce_sum_do_not_keepdims_random test_reduce_sum_keepdims_example
test_reduce_sum_keepdims_random test_reduce_sum_default_axes_keepdims_example
test_reduce_sum_default_axes_keepdims_random test_reduce_sum_negative_axes_keepdims_example
test_reduce_sum_negative_axes_keepdims_random test_reduce_sum_empty_axes_input_noop_example
test_reduce_sum_empty_axes_input_noop test_reduce_sum_square_do_not_keepdims_example
test_reduce_sum_square_do_not_keepdims_example_expanded
test_reduce_sum_square_do_not_keepdims_random
test_reduce_sum_square_do_not_keepdims_random_expanded test_reduce_sum_square_keepdims_example
test_reduce_sum_square_keepdims_example_expanded test_reduce_sum_square_keepdims_random
test_reduce_sum_square_keepdims_random_expanded
test_reduce_sum_square_default_axes_keepdims_example
test_reduce_sum_square_default_axes_keepdims_example_expanded
test_reduce_sum_square_default_axes_keepdims_random
test_reduce_sum_square_default_axes_keepdims_random_expanded
test_reduce_sum_square_negative_axes_keepdims_example
test_reduce_sum_square_negative_axes_keepdims_example_expanded
test_reduce_sum_square_negative_axes_keepdims_random
test_reduce_sum_square_negative_axes_keepdims_random_expanded test_selu_example test_selu
test_selu_default test_softsign_example test_softsign test_sqrt_example test_sqrt test_tile
test_tile_precomputed test_reduce_mean_do_not_keepdims_example
test_reduce_mean_do_not_keepdims_random test_reduce_mean_keepdims_example
test_reduce_mean_keepdims_random test_reduce_mean_negative_axes_keepdims_example
test_reduce_mean_negative_axes_keepdims_random pytorch-converted/test_LogSoftmax
pytorch-converted/test_SELU pytorch-converted/test_Softmin
pytorch-converted/test_log_softmax_dim3 pytorch-converted/test_log_softmax_lastdim
pytorch-operator/test_operator_basic pytorch-operator/test_operator_min
pytorch-operator/test_operator_params pytorch-operator/test_operator_reduced_sum
pytorch-operator/test_operator_reduced_sum_keepdim pytorch-operator/test_operator_selu
pytorch-operator/test_operator_symbolic_override
pytorch-operator/test_operator_symbolic_override_nested simple/test_expand_shape_model1
simple/test_expand_shape_model2 simple/test_expand_shape_model3 simple/test_expand_shape_model4
pytorch-operator/test_operator_reduced_mean pytorch-operator/test_operator_reduced_mean_keepdim
pytorch-operator/test_operator_sqrt test_reduce_max_do_not_keepdims_example
test_reduce_max_do_not_keepdims_random test_reduce_max_keepdims_example
test_reduce_max_keepdims_random test_reduce_max_default_axes_keepdim_example
test_reduce_max_default_axes_keepdims_random test_reduce_max_negative_axes_keepdims_example
test_reduce_max_negative_axes_keepdims_random test_reduce_min_do_not_keepdims_example
test_reduce_min_do_not_keepdims_random test_reduce_min_keepdims_example
test_reduce_min_keepdims_random test_reduce_min_default_axes_keepdims_example
test_reduce_min_default_axes_keepdims_random test_reduce_min_negative_axes_keepdims_example
test_reduce_min_negative_axes_keepdims_random
test_argmax_no_keepdims_example test_argmax_no_keepdims_example_select_last_index
test_argmax_no_keepdims_random test_argmax_no_keepdims_random_select_last_index
test_argmax_keepdims_example test_argmax_keepdims_example_select_last_index
test_argmax_keepdims_random test_argmax_keepdims_random_select_last_index
test_argmax_default_axis_example test_argmax_default_axis_example_select_last_index
test_argmax_default_axis_random test_argmax_default_axis_random_select_last_index
test_argmax_negative_axis_keepdims_example
test_argmax_negative_axis_keepdims_example_select_last_index
test_argmax_negative_axis_keepdims_random
test_argmax_negative_axis_keepdims_random_select_last_index test_argmin_no_keepdims_example
test_argmin_no_keepdims_example_select_last_index test_argmin_no_keepdims_random
test_argmin_no_keepdims_random_select_last_index test_argmin_keepdims_example
test_argmin_keepdims_example_select_last_index test_argmin_keepdims_random
test_argmin_keepdims_random_select_last_index test_argmin_default_axis_example
test_argmin_default_axis_example_select_last_index test_argmin_default_axis_random
test_argmin_default_axis_random_select_last_index test_argmin_negative_axis_keepdims_example
test_argmin_negative_axis_keepdims_example_select_last_index
test_argmin_negative_axis_keepdims_random
test_argmin_negative_axis_keepdims_random_select_last_index
test_maxpool_1d_default test_averagepool_1d_default pytorch-converted/test_MaxPool1d
pytorch-converted/test_MaxPool1d_stride pytorch-operator/test_operator_maxpool
test_sign simple/test_sign_model
test_hardmax_example test_hardmax_one_hot test_hardmax_axis_0 test_hardmax_axis_1
test_hardmax_axis_2 test_hardmax_negative_axis test_hardmax_default_axis
test_add_bcast test_sub_bcast pytorch-operator/test_operator_add_broadcast
pytorch-operator/test_operator_add_size1_broadcast
pytorch-operator/test_operator_add_size1_right_broadcast
pytorch-operator/test_operator_add_size1_singleton_broadcast test_prelu_example test_prelu_broadcast
pytorch-converted/test_PReLU_1d_multiparam pytorch-converted/test_PReLU_2d_multiparam
pytorch-converted/test_PReLU_3d_multiparam
test_gemm_default_matrix_bias test_gemm_transposeA test_gemm_all_attributes
test_averagepool_2d_same_upper test_maxpool_2d_same_upper light/inception_v1
test_constant_pad test_constant_pad_axes test_constant_pad_negative_axes
test_center_crop_pad_crop_expanded test_center_crop_pad_pad_expanded
test_center_crop_pad_crop_and_pad_expanded test_center_crop_pad_crop_axes_hwc_expanded
test_center_crop_pad_crop_negative_axes_hwc_expanded test_center_crop_pad_crop_axes_chw_expanded
pytorch-converted/test_ZeroPad2d pytorch-converted/test_ConstantPad2d
pytorch-converted/test_ReflectionPad2d pytorch-converted/test_ReplicationPad2d
pytorch-operator/test_operator_pad
test_div_example test_div test_div_bcast pytorch-converted/test_Softsign
test_edge_pad test_reflect_pad test_wrap_pad test_clip_default_int8_inbounds_expanded
test_clip_default_int8_min test_clip_default_int8_max test_clip_default_int8_inbounds
test_max_int8 test_max_int16 test_max_int32 test_max_int64 test_max_uint8 test_max_uint16
test_max_uint32 test_max_uint64 test_min_int8 test_min_int16 test_min_int32 test_min_int64
test_min_uint8 test_min_uint16 test_min_uint32 test_min_uint64 test_maxpool_2d_uint8
pytorch-converted/test_Embedding pytorch-converted/test_Embedding_sparse
pytorch-operator/test_operator_addmm
test_matmul_2d test_matmul_3d test_matmul_4d test_matmul_bcast test_matmul_1d_3d
test_matmul_4d_1d test_matmul_1d_1d
test_pow_example test_pow test_pow_bcast_array test_pow_types_float32_int64
test_pow_types_float32_int32 test_pow_types_float32_uint64 test_pow_types_float32_uint32
pytorch-operator/test_operator_pow
test_layer_normalization_2d_axis0 test_layer_normalization_2d_axis1
test_layer_normalization_2d_axis_negative_1 test_layer_normalization_2d_axis_negative_2
test_layer_normalization_3d_axis0_epsilon test_layer_normalization_3d_axis1_epsilon
test_layer_normalization_3d_axis2_epsilon test_layer_normalization_3d_axis_negative_1_epsilon
test_layer_normalization_3d_axis_negative_2_epsilon
test_layer_normalization_3d_axis_negative_3_epsilon test_layer_normalization_4d_axis0
test_layer_normalization_4d_axis1 test_layer_normalization_4d_axis2
test_layer_normalization_4d_axis3 test_layer_normalization_4d_axis_negative_1
test_layer_normalization_4d_axis_negative_2 test_layer_normalization_4d_axis_negative_3
test_layer_normalization_4d_axis_negative_4 test_layer_normalization_default_axis
test_depthtospace_example test_depthtospace_crd_mode_example test_spacetodepth
test_spacetodepth_example test_spacetodepth_dcr_mode_example
test_spacetodepth_crd_mode_example
test_gelu_default_1 test_gelu_default_2 test_gelu_tanh_1 test_gelu_tanh_2
test_reduce_log_sum_desc_axes test_reduce_log_sum_asc_axes test_reduce_log_sum_default
test_reduce_log_sum_negative_axes
test_thresholdedrelu_example test_thresholdedrelu test_thresholdedrelu_default
test_averagepool_2d_dilations test_averagepool_3d_default test_averagepool_3d_dilations_small
test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True
test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False
test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True
test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False
pytorch-converted/test_AvgPool3d pytorch-converted/test_AvgPool3d_stride
pytorch-converted/test_AvgPool3d_stride1_pad0_gpu_input test_maxpool_2d_dilations
pytorch-converted/test_MaxPool2d_stride_padding_dilation
pytorch-converted/test_MaxPool1d_stride_padding_dilation test_maxpool_3d_default
test_maxpool_3d_dilations test_maxpool_3d_dilations_use_ref_impl
test_maxpool_3d_dilations_use_ref_impl_large pytorch-converted/test_MaxPool3d
pytorch-converted/test_MaxPool3d_stride pytorch-converted/test_MaxPool3d_stride_padding
test_add_uint32 test_add_uint64 test_and2d test_and3d test_and4d test_and_bcast3v1d
test_and_bcast3v2d test_and_bcast4v2d test_and_bcast4v3d test_and_bcast4v4d
test_clip_default_int8_max_expanded test_clip_default_int8_min_expanded
test_clip_default_max_expanded test_clip_default_min_expanded test_clip_example_expanded
test_clip_expanded test_clip_inbounds_expanded test_clip_min_greater_than_max_expanded
test_clip_outbounds_expanded test_clip_splitbounds_expanded test_equal test_equal_bcast
test_equal_int16 test_equal_int8 test_equal_uint16 test_equal_uint32 test_equal_uint64
test_equal_uint8 test_greater test_greater_bcast test_greater_equal test_greater_equal_bcast
test_greater_equal_bcast_expanded test_greater_equal_expanded test_greater_equal_int16
test_greater_equal_int16_expanded test_greater_equal_int8 test_greater_equal_int8_expanded
test_greater_equal_uint16 test_greater_equal_uint16_expanded test_greater_equal_uint32
test_greater_equal_uint32_expanded test_greater_equal_uint64 test_greater_equal_uint64_expanded
test_greater_equal_uint8 test_greater_equal_uint8_expanded test_greater_int16 test_greater_int8
test_greater_uint16 test_greater_uint32 test_greater_uint64 test_greater_uint8 test_isinf
test_isinf_float16 test_isinf_negative test_isinf_positive test_isnan test_isnan_float16
test_less test_less_bcast test_less_equal test_less_equal_bcast test_less_equal_bcast_expanded
test_less_equal_expanded test_less_equal_int16 test_less_equal_int16_expanded
test_less_equal_int8 test_less_equal_int8_expanded test_less_equal_uint16
test_less_equal_uint16_expanded test_less_equal_uint32 test_less_equal_uint32_expanded
test_less_equal_uint64 test_less_equal_uint64_expanded test_less_equal_uint8
test_less_equal_uint8_expanded test_less_int16 test_less_int8 test_less_uint16 test_less_uint32
test_less_uint64 test_less_uint8 test_logsoftmax_axis_0_expanded
test_logsoftmax_axis_0_expanded_ver18 test_logsoftmax_axis_1_expanded
test_logsoftmax_axis_1_expanded_ver18 test_logsoftmax_axis_2_expanded
test_logsoftmax_axis_2_expanded_ver18 test_logsoftmax_default_axis_expanded
test_logsoftmax_default_axis_expanded_ver18 test_logsoftmax_example_1_expanded
test_logsoftmax_example_1_expanded_ver18 test_logsoftmax_large_number_expanded
test_logsoftmax_large_number_expanded_ver18 test_logsoftmax_negative_axis_expanded
test_logsoftmax_negative_axis_expanded_ver18 test_mul_uint32 test_mul_uint64 test_mvn_expanded
test_mvn_expanded_ver18 test_not_2d test_not_3d test_not_4d test_or2d test_or3d test_or4d
test_or_bcast3v1d test_or_bcast3v2d test_or_bcast4v2d test_or_bcast4v3d test_or_bcast4v4d
test_reduce_max_bool_inputs test_reduce_min_bool_inputs test_softmax_axis_0_expanded
test_softmax_axis_0_expanded_ver18 test_softmax_axis_1_expanded
test_softmax_axis_1_expanded_ver18 test_softmax_axis_2_expanded
test_softmax_axis_2_expanded_ver18 test_softmax_default_axis_expanded
test_softmax_default_axis_expanded_ver18 test_softmax_example_expanded
test_softmax_example_expanded_ver18 test_softmax_large_number_expanded
test_softmax_large_number_expanded_ver18 test_softmax_negative_axis_expanded
test_softmax_negative_axis_expanded_ver18 test_where_example test_where_long_example test_xor2d
test_xor3d test_xor4d test_xor_bcast3v1d test_xor_bcast3v2d test_xor_bcast4v2d
test_xor_bcast4v3d test_xor_bcast4v4d pytorch-operator/test_operator_non_float_params
pytorch-operator/test_operator_repeat pytorch-operator/test_operator_repeat_dim_overflow
'''.split()

REFUSED = {
    r"ONNX input '[^']+' has an axis of size": '''
        test_reduce_l1_empty_set test_reduce_l1_empty_set_expanded test_reduce_l2_empty_set
        test_reduce_log_sum_empty_set test_reduce_log_sum_empty_set_expanded
        test_reduce_max_empty_set test_reduce_max_empty_set_bool test_reduce_min_empty_set
        test_reduce_sum_empty_set test_reduce_sum_empty_set_non_reduced_axis_zero
        test_reduce_sum_square_empty_set test_reduce_sum_square_empty_set_expanded
        test_reshape_allowzero_reordered test_split_zero_size_splits_opset13
        test_split_zero_size_splits_opset18
    '''.split(),
    r"ONNX input '[^']+' is of type bool; a Caffe blob holds floats": '''
        test_training_dropout test_training_dropout_default
        test_training_dropout_default_mask test_training_dropout_mask
        test_training_dropout_zero_ratio test_training_dropout_zero_ratio_mask
    '''.split(),
    r"ONNX input '[^']+' is of type int": '''
        test_add_int16 test_add_int8 test_constantofshape_float_ones
        test_constantofshape_int_shape_zero test_constantofshape_int_zeros test_div_int16
        test_div_int32_trunc test_div_int8 test_mul_int16 test_mul_int8
        test_pow_types_int32_float32 test_pow_types_int32_int32 test_pow_types_int64_float32
        test_pow_types_int64_int64 test_range_int32_type_negative_delta test_sub_int16
        test_sub_int8
    '''.split(),
    r"ONNX input '[^']+' is of type object; a Caffe blob holds floats": '''
        test_equal_string test_equal_string_broadcast
    '''.split(),
    r"ONNX input '[^']+' is of type uint": '''
        test_add_uint16 test_add_uint8 test_div_uint16 test_div_uint32 test_div_uint64
        test_div_uint8 test_mul_uint16 test_mul_uint8 test_sub_uint16 test_sub_uint32
        test_sub_uint64 test_sub_uint8
    '''.split(),
    r"ONNX node '[^']+' \(op BatchNormalization\): training_mode batch normalization does not": '''
        test_batchnorm_epsilon_training_mode test_batchnorm_example_training_mode
    '''.split(),
    r"ONNX node '[^']+' \(op Clip\): min": '''
        test_clip_min_greater_than_max
    '''.split(),
    r"ONNX node '[^']+' \(op Dropout\): its mask output": '''
        test_dropout_default_mask test_dropout_default_mask_ratio
    '''.split(),
    r"ONNX node '[^']+' \(op MaxPool\): its Indices output": '''
        test_maxpool_with_argmax_2d_precomputed_pads
        test_maxpool_with_argmax_2d_precomputed_strides
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): bilinear resize with coordinate_transformation_mode": '''
        test_resize_downsample_scales_linear test_resize_downsample_scales_linear_antialias
        test_resize_downsample_sizes_linear_antialias
        test_resize_downsample_sizes_linear_pytorch_half_pixel
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): cubic resize does not convert: Caffe has no cubic": '''
        test_resize_downsample_scales_cubic
        test_resize_downsample_scales_cubic_A_n0p5_exclude_outside
        test_resize_downsample_scales_cubic_align_corners
        test_resize_downsample_scales_cubic_antialias test_resize_downsample_sizes_cubic
        test_resize_downsample_sizes_cubic_antialias test_resize_upsample_scales_cubic
        test_resize_upsample_scales_cubic_A_n0p5_exclude_outside
        test_resize_upsample_scales_cubic_align_corners
        test_resize_upsample_scales_cubic_asymmetric test_resize_upsample_sizes_cubic
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): keep_aspect_ratio_policy not_larger has no Caffe": '''
        test_resize_downsample_sizes_nearest_not_larger
        test_resize_upsample_sizes_nearest_not_larger
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): keep_aspect_ratio_policy not_smaller has no Caffe": '''
        test_resize_downsample_sizes_nearest_not_smaller
        test_resize_upsample_sizes_nearest_not_smaller
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): linear resize does not convert: Caffe": '''
        test_resize_downsample_scales_linear_half_pixel_symmetric
        test_resize_tf_crop_and_resize test_resize_tf_crop_and_resize_axes_2_3
        test_resize_tf_crop_and_resize_axes_3_2
        test_resize_tf_crop_and_resize_extrapolation_value
        test_resize_upsample_scales_linear_half_pixel_symmetric
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): nearest resize converts only by integer factors that": '''
        test_resize_downsample_scales_nearest test_resize_downsample_sizes_nearest
        test_resize_upsample_sizes_nearest test_resize_upsample_sizes_nearest_axes_2_3
        test_resize_upsample_sizes_nearest_axes_3_2
        test_resize_upsample_sizes_nearest_ceil_half_pixel
        test_resize_upsample_sizes_nearest_floor_align_corners
        test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric
    '''.split(),
    r"ONNX node '[^']+' \(op Resize\): scales": '''
        test_resize_downsample_scales_linear_align_corners
    '''.split(),
    r"ONNX node '[^']+' \(op Slice\): its output": '''
        test_slice_start_out_of_bounds
    '''.split(),
    r"ONNX output '[^']+' is a constant; a Caffe net cannot output a constant": '''
        test_constant test_shape test_shape_clip_end test_shape_clip_start test_shape_end_1
        test_shape_end_negative_1 test_shape_example test_shape_start_1
        test_shape_start_1_end_2 test_shape_start_1_end_negative_1
        test_shape_start_greater_than_end test_shape_start_negative_1
    '''.split(),
}

CASES = [(name, None) for name in MATCH] + \
    [(name, pattern) for pattern, names in REFUSED.items() for name in names]


def test_the_counts_docs_onnx_md_gives():
    text = open(os.path.join(os.path.dirname(__file__), os.pardir, "docs", "onnx.md")).read()
    text = " ".join(text.split())
    assert "%d convert and give ONNX's outputs, %d are refused" % (
        len(MATCH), sum(len(v) for v in REFUSED.values())) in text
    assert len(set(MATCH)) == len(MATCH)


def _load(name):
    return data_case(name) if "/" in name else node_case(name)


def _needs_constant(model, message):
    """The graph input (not the first) that a refusal asks for as a constant: a weight, a
    shape, axes, scales ... given as an input by ONNX's case, or an integer input (axes,
    indices)."""
    found = re.search(r"its \w+ '([^']+)' must be a constant", message) or \
        re.search(r"^ONNX input '([^']+)' is of type u?int", message)
    inits = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in inits]
    if found and found.group(1) in inputs[1:]:
        return found.group(1)
    return None


@pytest.mark.slow   # the whole table: about 20 s on 2 cores
@pytest.mark.parametrize("name,refusal", CASES, ids=[c[0] for c in CASES])
def test_backend_case(tmp_path, name, refusal):
    model, inputs, expected = _load(name)
    frozen = []
    while True:  # the inputs that must be constants become initializers, one by one
        try:
            net, feed, blobs = convert(model, inputs, frozen, tmp_path, "case")
        except CaffeError as exc:
            more = _needs_constant(model, str(exc))
            if more is not None and more not in frozen:
                frozen.append(more)
                continue
            if refusal is None:
                raise
            assert re.match(refusal, str(exc)), str(exc)
            return
        break
    assert refusal is None, "converted; expected a refusal matching %r" % refusal
    net.forward(**{n: x.astype(np.float32) for n, x in feed})
    for blob, want in zip(blobs, expected):
        got = net.blobs[blob].data
        want = np.asarray(want, dtype=np.float32)
        assert got.shape == want.shape, (blob, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
