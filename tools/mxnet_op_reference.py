#!/usr/bin/env python
"""Write the operator-attribute references that ``tests/test_mxnet_ops.py`` reads.

Each case is one MXNet operator (or a few of one kind) with attribute values a real model may
carry that the whole-model cases of ``tools/mxnet_reference.py`` leave out: 1-D and 3-D
convolutions, Deconvolution groups / dilation / target_shape with adj, pooling with a stride
over the kernel, BatchNorm on 2-D and 3-D blobs, PReLU on 2-D, softmaxes along other axes and
of large logits, Reshape codes, squeeze / expand_dims, reductions with ``exclude``, LRN,
BilinearResize2D and AdaptiveAvgPooling2D sizes, ``max`` over any axes, Embedding, InstanceNorm
and Pad, ... Needs MXNet 1.9.1 (the venv of
``tools/mxnet_reference.py``) and runs without pycaffe-lite::

    MXNET_SUBGRAPH_BACKEND=NONE python tools/mxnet_op_reference.py tests/fixtures/mxnet_ops

The files are those of ``tools/mxnet_reference.py`` (``NAME-symbol.json``,
``NAME-0000.params``, inputs stored as float16 that MXNet was given exactly, its outputs, a
``manifest.json``). Outputs come from the oneDNN build as pip installs it, compared with
MXNet's own CPU kernels (``MXNET_MKLDNN_ENABLED=0``, in a second process): where the two
differ the script says so, and the cases marked ``native`` keep MXNet's own kernel's (where
oneDNN computes something else than the operator's documentation says). Cases that MXNet runs
but Caffe cannot express carry ``expect_error``: the node, and words the error must name (the
op and the attribute).
"""

import os
import sys
import zlib

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxnet_reference as ref  # noqa: E402  (the same Writer and random parameters)

S = mx.sym


def x_(shape, scale=1.0):
    return ref.make_input(shape, scale)


def convolutions(w):
    d = S.var("data")
    w.symbol("conv_1d", S.Convolution(d, num_filter=4, kernel=(3,), stride=(2,), pad=(1,),
                                      name="conv1d"),
             {"data": x_((2, 3, 10))}, note="Convolution of an NCW blob (1-D)")
    w.symbol("conv_1d_group", S.Convolution(d, num_filter=4, kernel=(3,), dilate=(2,),
                                            num_group=2, no_bias=True, name="conv1d_group"),
             {"data": x_((1, 4, 9))}, note="a grouped dilated 1-D convolution without a bias")
    w.symbol("conv_3d", S.Convolution(d, num_filter=3, kernel=(2, 3, 3), pad=(0, 1, 1),
                                      stride=(1, 2, 1), name="conv3d"),
             {"data": x_((1, 2, 4, 5, 6))}, note="Convolution of an NCDHW blob (3-D)")
    w.symbol("conv_attrs", S.Group([
        S.Convolution(d, num_filter=5, kernel=(3, 3), dilate=(1, 2), pad=(1, 2),
                      stride=(2, 1), no_bias=True, name="conv_dil_rect"),
        S.Convolution(d, num_filter=8, kernel=(3, 3), pad=(1, 1), num_group=4,
                      name="conv_depthwise_x2"),
        S.Convolution(d, num_filter=4, kernel=(2, 2), stride=(3, 3), name="conv_stride3")]),
        {"data": x_((2, 4, 7, 8))},
        note="dilation along one axis without a bias, depthwise with 2 filters per channel, "
             "stride over the kernel")


def deconvolutions(w):
    d = S.var("data")
    w.symbol("deconv_attrs", S.Group([
        S.Deconvolution(d, num_filter=4, kernel=(3, 3), stride=(2, 2), num_group=2,
                        no_bias=True, name="deconv_group"),
        S.Deconvolution(d, num_filter=2, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                        adj=(1, 1), dilate=(2, 2), no_bias=False, name="deconv_dilate"),
        S.Deconvolution(d, num_filter=3, kernel=(2, 2), stride=(1, 1), no_bias=False,
                        name="deconv_stride1")]),
        {"data": x_((1, 4, 5, 6))}, note="groups without a bias, dilation with adj, stride 1")
    w.symbol("deconv_1d", S.Deconvolution(d, num_filter=2, kernel=(4,), stride=(2,), pad=(1,),
                                          name="deconv1d"),
             {"data": x_((1, 3, 7))}, note="Deconvolution of an NCW blob")
    w.symbol("deconv_target_adj", S.Deconvolution(
        d, num_filter=2, kernel=(4, 4), stride=(2, 2), pad=(1, 1), adj=(1, 1),
        target_shape=(11, 12), name="deconv_target_adj"), {"data": x_((1, 3, 5, 6))},
        note="target_shape given with pad and adj: MXNet ignores both")


def poolings(w):
    d = S.var("data")
    outs = []
    for pt in ("max", "avg", "sum"):
        outs.append(S.Pooling(d, kernel=(2, 2), stride=(3, 3), pool_type=pt,
                              name="p_stride_%s" % pt))
        outs.append(S.Pooling(d, kernel=(2, 3), stride=(3, 4), pad=(1, 1), pool_type=pt,
                              count_include_pad=False, name="p_stride_pad_%s" % pt))
        outs.append(S.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), global_pool=True,
                              pool_type=pt, name="p_global_kernel_%s" % pt))
    outs.append(S.Pooling(d, kernel=(2, 2), stride=(3, 3), pool_type="avg",
                          pooling_convention="full", name="p_stride_full"))
    outs.append(S.Pooling(d, kernel=(3, 3), pool_type="max", name="p_stride_default"))
    w.symbol("pooling_attrs", S.Group(outs), {"data": x_((1, 2, 10, 11))},
             note="stride over the kernel, count_include_pad false, global_pool with a kernel "
                  "set (ignored), the default stride 1")
    w.symbol("pooling_lp", S.Pooling(d, kernel=(2, 2), stride=(2, 2), pool_type="lp",
                                     p_value=2, name="p_lp"),
             {"data": x_((1, 2, 6, 6))}, note="lp pooling: no Caffe pooling",
             expect_error=["p_lp", "Pooling", "lp"])
    w.symbol("pooling_1d", S.Pooling(d, kernel=(3,), stride=(2,), pool_type="max",
                                     name="p_1d"),
             {"data": x_((1, 2, 9))}, note="1-D pooling", expect_error=["p_1d", "Pooling", "2-D"])
    w.symbol("pooling_v1", S.Group([
        S.Pooling_v1(d, kernel=(3, 3), stride=(2, 2), pool_type="avg",
                     pooling_convention="full", name="p1_avg_full"),
        S.Pooling_v1(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                     pooling_convention="full", name="p1_avg_pad_full"),
        S.Pooling_v1(d, kernel=(3, 2), stride=(2, 2), pad=(1, 1), pool_type="avg",
                     name="p1_avg_pad"),
        S.Pooling_v1(d, kernel=(3, 3), stride=(2, 2), pool_type="max",
                     pooling_convention="full", name="p1_max_full"),
        S.Pooling_v1(d, kernel=(3, 3), stride=(2, 2), pool_type="sum",
                     pooling_convention="full", name="p1_sum_full")]),
        {"data": x_((1, 2, 10, 11))},
        note="the old Pooling_v1: its average divides by the whole kernel, also where the "
             "window runs past the padded input")


def batchnorms(w):
    d = S.var("data")
    w.symbol("bn_2d", S.Group([
        S.BatchNorm(d, fix_gamma=False, eps=1e-9, name="bn_2d_tiny_eps"),
        S.BatchNorm(d, fix_gamma=True, axis=-1, use_global_stats=True, name="bn_2d_axis_m1")]),
        {"data": x_((3, 5))}, note="BatchNorm of an (N, C) blob, tiny eps, axis -1 = 1")
    w.symbol("bn_3d", S.BatchNorm(d, fix_gamma=False, eps=1e-5, momentum=0.1, name="bn_3d"),
             {"data": x_((2, 4, 6))}, note="BatchNorm of an (N, C, L) blob")
    w.symbol("bn_axis_last", S.BatchNorm(d, fix_gamma=False, axis=3, name="bn_nhwc"),
             {"data": x_((1, 3, 4, 5))}, note="BatchNorm over the last axis (channels-last)",
             expect_error=["bn_nhwc", "BatchNorm", "axis"])
    w.symbol("bn_v1", S.Group([S.BatchNorm_v1(d, name="bn_v1_defaults"),
                               S.BatchNorm_v1(d, fix_gamma=False, eps=1e-4, name="bn_v1_free")]),
             {"data": x_((2, 3, 4, 5))}, note="the old BatchNorm_v1")


def dense(w):
    d = S.var("data")
    w.symbol("fc_3d", S.Group([
        S.FullyConnected(d, num_hidden=4, flatten=False, name="fc_3d_noflat"),
        S.FullyConnected(d, num_hidden=3, flatten=True, no_bias=True, name="fc_3d_flat")]),
        {"data": x_((2, 5, 6))}, note="FullyConnected of a 3-D blob, flatten false and true")
    w.symbol("fc_2d_noflat", S.FullyConnected(d, num_hidden=4, flatten=False, no_bias=True,
                                              name="fc_2d_noflat"),
             {"data": x_((3, 7))}, note="FullyConnected of a 2-D blob, flatten false")


def activations(w):
    d = S.var("data")
    outs = [S.LeakyReLU(d, act_type="prelu", name="prelu_2d"),
            S.LeakyReLU(d, act_type="rrelu", name="rrelu_default")[0],
            S.LeakyReLU(d, act_type="elu", name="elu_default"),
            S.LeakyReLU(d, act_type="leaky", slope=-0.3, name="leaky_negative_slope"),
            S.Activation(d, act_type="softrelu", name="softrelu_2d"),
            S.clip(d, a_min=-2.0, a_max=-0.5, name="clip_negative")]
    w.symbol("activations_2d", S.Group(outs), {"data": x_((3, 6), 3.0)},
             note="PReLU with per-channel slopes of an (N, C) blob, rrelu and elu defaults, "
                  "a negative leaky slope")
    w.symbol("prelu_3d", S.LeakyReLU(d, act_type="prelu", name="prelu_3d"),
             {"data": x_((2, 4, 5), 2.0)}, note="PReLU of an (N, C, L) blob")


def softmaxes(w):
    d = S.var("data")
    outs = [S.softmax(d, axis=0, name="softmax_axis0"),
            S.softmax(d, axis=2, temperature=0.5, name="softmax_axis2_temp"),
            S.log_softmax(d, axis=1, temperature=3.0, name="log_softmax_axis1_temp"),
            S.SoftmaxActivation(d, mode="channel", name="softmax_act_channel")]
    w.symbol("softmax_axes", S.Group(outs), {"data": x_((2, 3, 4, 5), 2.0)},
             note="softmax along axes 0 and 2 with temperatures, log_softmax along axis 1")
    w.symbol("log_softmax_wide", S.Group([
        S.log_softmax(d, name="log_softmax_last"),
        S.log_softmax(d, axis=1, name="log_softmax_c")]), {"data": x_((2, 4, 3, 6), 40.0)},
        note="log_softmax of logits far apart: MXNet's values stay finite")
    w.symbol("softmax_output_4d", S.SoftmaxOutput(d, S.var("label"), name="softmax_flat"),
             {"data": x_((2, 3, 4, 5), 2.0)}, label_shapes={"label": (2, 3, 4)}, native=True,
             note="SoftmaxOutput of a 4-D blob without multi_output / preserve_shape: over "
                  "each item's C x H x W values")
    w.symbol("softmax_output_2d", S.Group([
        S.SoftmaxOutput(d, S.var("label"), name="softmax_2d"),
        S.SoftmaxActivation(d, name="softmax_act_2d")]),
        {"data": x_((3, 7), 2.0)}, label_shapes={"label": (3,)},
        note="SoftmaxOutput and SoftmaxActivation of (N, K) scores")
    w.symbol("softmax_output_multi_3d", S.SoftmaxOutput(d, S.var("label"), multi_output=True,
                                                        name="softmax_multi_3d"),
             {"data": x_((2, 4, 6), 2.0)}, label_shapes={"label": (2, 6)},
             note="SoftmaxOutput multi_output of an (N, C, L) blob")


def shapes(w):
    d = S.var("data")
    outs = [S.Reshape(d, shape=(0, 0, -3), name="r_00m3"),
            S.Reshape(d, shape=(-3, -3), name="r_m3m3"),
            S.Reshape(d, shape=(-4, -1, 2, -2), name="r_m4_first"),
            S.Reshape(d, shape=(0, 0, -4, 2, -1, 0), name="r_m4_infer_last"),
            S.Reshape(d, shape=(-1,), name="r_all"),
            S.Reshape(d, shape=(0, 0, -1), reverse=True, name="r_rev_00m1"),
            S.Reshape(d, shape=(-1, 5), reverse=True, name="r_rev_m1_5"),
            S.Reshape(d, shape=(2, -2), name="r_m2"),
            S.reshape(d, shape=(4, 0, -1), name="r_lower"),
            S.transpose(d, name="t_default"),
            S.transpose(d, axes=(1, 0, 3, 2), name="t_batch"),
            S.expand_dims(d, axis=0, name="ed_0"), S.expand_dims(d, axis=-1, name="ed_m1"),
            S.expand_dims(d, axis=2, name="ed_2"),
            S.Flatten(S.sum(d, axis=3), name="flatten_3d"),
            S.slice(d, begin=(None, 1, -3), end=(None, None, -1), name="slice_none"),
            S.slice(d, begin=(1,), end=(2,), name="slice_batch"),
            S.slice_axis(d, axis=0, begin=0, end=-1, name="slice_axis0"),
            S.slice_axis(d, axis=2, begin=-2, end=None, name="slice_axis_neg"),
            S.Concat(d, d * 2.0, dim=0, name="concat_0"),
            S.Concat(d, d * 2.0, d, dim=-2, name="concat_m2"),
            S.Crop(d, S.var("like"), offset=(1, 1), name="crop_like_offset")]
    sq = S.SliceChannel(d, num_outputs=5, axis=-1, squeeze_axis=True, name="split_last")
    outs += [sq[0], sq[4]]
    sp = S.split(d, num_outputs=2, axis=0, name="split_batch")
    outs += [sp[1]]
    w.symbol("shape_codes", S.Group(outs), {"data": x_((2, 3, 4, 5)),
                                            "like": x_((1, 1, 2, 3))},
             note="Reshape codes (-3 twice, -4 with -1 first or last, reverse), transpose "
                  "default, expand_dims, slices with None and negative bounds, Concat along "
                  "0 and -2, Crop to a like input with an offset, splits along -1 and 0")
    w.symbol("crop_center_hw", S.Crop(d, h_w=(2, 3), center_crop=True, name="crop_center_hw"),
             {"data": x_((1, 2, 5, 7))}, note="Crop to h_w around the centre")
    w.symbol("slice_step", S.slice(d, begin=(None, None, 0), end=(None, None, 5),
                                   step=(None, None, 2), name="slice_step2"),
             {"data": x_((1, 2, 5, 6))}, note="a slice with a step",
             expect_error=["slice_step2", "slice", "steps"])
    w.symbol("squeeze", S.Group([S.squeeze(d, name="sq_all"),
                                 S.squeeze(d, axis=(1,), name="sq_1"),
                                 S.squeeze(d, axis=(-1, 3), name="sq_neg")]),
             {"data": x_((2, 1, 3, 1, 1))}, note="squeeze of every 1 and of given axes")
    w.symbol("squeeze_to_scalar", S.squeeze(d, name="sq_scalar"), {"data": x_((1, 1, 1))},
             note="squeeze of a blob of ones: MXNet keeps shape (1,)")
    w.symbol("slice_clamped", S.Group([
        S.slice(d, begin=(None, -100, 1), end=(None, 100, 1000), name="slice_clamp"),
        S.slice(d, begin=(1, 0), end=(1000, 2), name="slice_clamp_batch")]),
        {"data": x_((3, 4, 5, 2))}, native=True,
        note="slice bounds past the axis: MXNet clamps them (its oneDNN kernel fails)")
    w.symbol("slice_empty", S.slice(d, begin=(None, 3), end=(None, 1), name="slice_empty"),
             {"data": x_((2, 4, 3))}, note="an empty slice (MXNet gives a blob of no values)",
             expect_error=["slice_empty", "slice", "empty"])
    w.symbol("reshape_target_shape", S.Group([
        S.Reshape(d, target_shape=(0, 12), name="rt_infer_first"),
        S.Reshape(d, target_shape=(6, 0, 2), name="rt_infer_mid"),
        S.Reshape(d, target_shape=(9, 0), keep_highest=True, name="rt_keep_highest")]),
        {"data": x_((2, 3, 4, 5))},
        note="the deprecated target_shape (one 0 inferred) and keep_highest of old files")


def reductions(w):
    d = S.var("data")
    outs = [S.mean(d, axis=(0, 1), exclude=True, name="mean_exclude"),
            S.sum(d, name="sum_all"),
            S.mean(d, keepdims=True, name="mean_all_keep"),
            S.sum(d, axis=-1, name="sum_last"),
            S.sum_axis(d, axis=3, keepdims=True, name="sum_axis_keep"),
            S.mean(d, axis=(1, 2, 3), keepdims=True, name="mean_chw_keep")]
    w.symbol("reductions", S.Group(outs), {"data": x_((2, 3, 4, 5))},
             note="mean / sum with exclude, over all axes, keepdims, axis -1")
    w.symbol("reduce_leading", S.mean(d, axis=1, name="mean_c"), {"data": x_((2, 3, 4, 5))},
             note="a mean over the channels only", expect_error=["mean_c", "mean", "axes"])


def arithmetic(w):
    d, o = S.var("data"), S.var("other")
    outs = [S._internal._power_scalar(d, scalar=2.0, name="pow2"),
            S._internal._power_scalar(S.abs(d) + 0.1, scalar=0.5, name="pow_half"),
            S._internal._power_scalar(S.abs(d) + 0.5, scalar=-1.5, name="pow_neg"),
            S._internal._rdiv_scalar(S.abs(d) + 0.5, scalar=-3.0, name="rdiv_neg"),
            S._internal._div_scalar(d, scalar=-0.25, name="div_neg"),
            S._internal._rminus_scalar(d, scalar=-1.0, name="rminus_neg"),
            S.broadcast_add(d, o, name="bc_add_1c11"),
            S.broadcast_add(o, d, name="bc_add_1c11_rev"),
            S.broadcast_mul(d, o, name="bc_mul_1c11"),
            S.square(d, name="square"), S.sqrt(S.abs(d), name="sqrt"),
            S.rsqrt(S.abs(d) + 0.5, name="rsqrt"), S.reciprocal(d + 5.0, name="reciprocal"),
            S._internal._maximum(d, d * -1.0, name="maximum")]
    w.symbol("arith_attrs", S.Group(outs), {"data": x_((2, 3, 4, 5)), "other": x_((1, 3, 1, 1))},
             note="powers, negative scalars, broadcasts of a (1, C, 1, 1) input")
    w.symbol("broadcast_2d", S.Group([
        S.broadcast_add(d, o, name="bc_add_2d"), S.broadcast_add(o, d, name="bc_add_2d_rev"),
        S.broadcast_mul(d, o, name="bc_mul_2d")]),
        {"data": x_((3, 5)), "other": x_((1, 5))}, note="an (N, C) blob and a (1, C) operand")
    w.symbol("broadcast_spatial", S.broadcast_mul(d, o, name="bc_mul_spatial"),
             {"data": x_((2, 3, 4, 5)), "other": x_((2, 1, 4, 5))},
             note="a spatial attention map (N, 1, H, W): no Caffe broadcast",
             expect_error=["bc_mul_spatial", "broadcast_mul", "shapes"])
    w.symbol("broadcast_sub_channels", S.broadcast_sub(d, o, name="bc_sub_c"),
             {"data": x_((2, 3, 4, 5)), "other": x_((1, 3, 1, 1))},
             note="a per-channel subtraction",
             expect_error=["bc_sub_c", "broadcast_sub", "shapes"])


def normalisations(w):
    d = S.var("data")
    w.symbol("lrn_attrs", S.Group([
        S.LRN(d, nsize=3, alpha=1e-2, beta=0.5, knorm=1.0, name="lrn3"),
        S.LRN(d, nsize=5, name="lrn_default")]), {"data": x_((1, 7, 3, 4), 3.0)},
        note="LRN with nsize 3, alpha, beta, knorm 1, and MXNet's defaults")
    w.symbol("l2norm_low_rank", S.Group([
        S.L2Normalization(d, name="l2_instance_3d"),
        S.L2Normalization(d, mode="channel", eps=1e-3, name="l2_channel_3d"),
        S.L2Normalization(d, mode="spatial", name="l2_spatial_3d")]),
        {"data": x_((2, 3, 5))}, note="L2Normalization of an (N, C, L) blob")
    w.symbol("upsampling_attrs", S.UpSampling(d, scale=3, sample_type="nearest",
                                              name="up_nearest3"),
             {"data": x_((1, 2, 3, 4))}, note="nearest UpSampling by 3")
    w.symbol("resize_attrs", S.Group([
        S.contrib.BilinearResize2D(d, height=7, width=9, name="resize_hw"),
        S.contrib.BilinearResize2D(d, scale_height=1.5, scale_width=2.0, mode="size",
                                   name="resize_scale"),
        S.contrib.BilinearResize2D(d, S.var("like"), mode="like", name="resize_like"),
        S.contrib.BilinearResize2D(d, height=2, width=3, name="resize_down")]),
        {"data": x_((1, 2, 5, 6)), "like": x_((1, 1, 8, 4))},
        note="BilinearResize2D: height / width, scales, like, downsizing")
    w.symbol("resize_half_pixel", S.contrib.BilinearResize2D(
        d, height=7, width=9, align_corners=False, name="resize_hp"),
        {"data": x_((1, 2, 5, 6))}, note="half-pixel sampling",
        expect_error=["resize_hp", "BilinearResize2D", "align_corners"])
    w.symbol("adaptive_pool", S.Group([
        S.contrib.AdaptiveAvgPooling2D(d, output_size=(2, 3), name="ada_2x3"),
        S.contrib.AdaptiveAvgPooling2D(d, output_size=2, name="ada_2"),
        S.contrib.AdaptiveAvgPooling2D(d, name="ada_default")]),
        {"data": x_((1, 3, 6, 6))}, note="AdaptiveAvgPooling2D output sizes that divide")
    w.symbol("adaptive_pool_uneven", S.contrib.AdaptiveAvgPooling2D(d, output_size=(3, 3),
                                                                    name="ada_uneven"),
             {"data": x_((1, 2, 7, 7))}, note="windows of different sizes",
             expect_error=["ada_uneven", "AdaptiveAvgPooling2D", "output_size"])


def passthrough(w):
    d = S.var("data")
    w.symbol("dropout_always", S.Dropout(d, p=0.5, mode="always", name="drop_always"),
             {"data": x_((2, 3))}, note="Dropout that drops at inference too",
             expect_error=["drop_always", "Dropout", "always"])
    w.symbol("cast_int", S.Cast(d, dtype="int32", name="to_int"), {"data": x_((2, 3), 3.0)},
             note="a cast to integers rounds: no Caffe layer",
             expect_error=["to_int", "Cast", "int32"])
    w.symbol("dropout_axes", S.Group([S.Dropout(d, p=0.3, axes=(2, 3), name="drop_axes"),
                                      S.Cast(d, dtype="float64", name="to_f64")]),
             {"data": x_((2, 3, 4, 5))}, note="Dropout with axes (identity at inference), "
                                              "a cast to float64")


class OpWriter(ref.Writer):
    """The Writer of tools/mxnet_reference.py with the outputs of oneDNN's kernels and of
    MXNet's own compared; ``native`` cases keep MXNet's own (where oneDNN computes something
    else than the operator's documentation says: SoftmaxOutput of a 4-D blob, which oneDNN
    softmaxes along the last axis; or fails on: a slice past the axis' end), the others
    oneDNN's (MXNet's own CPU kernel of a dilated
    Deconvolution differs from oneDNN, cuDNN and the transposed convolution's definition).
    ``expect_error``: a list, the node and then words the error must name."""

    def record(self, name, inputs, outputs=None, note="", expect_error=None, native=False):
        if outputs is None:
            own = self.run_native(name, inputs)
            try:
                outputs = self.run_files(name, inputs)
            except mx.base.MXNetError as exc:
                if not native:
                    raise
                print("%s: oneDNN's kernels fail (%s)" % (name, str(exc).split("\n")[0]))
                outputs = own
            for i, (a, b) in enumerate(zip(outputs, own)):
                if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-5,
                                                         equal_nan=True):
                    print("%s output %d: MXNet's own kernel and oneDNN differ (%s kept)"
                          % (name, i, "own" if native else "oneDNN"))
            if native:
                outputs = own
        super().record(name, inputs, outputs, note)
        if expect_error:
            self.manifest[name]["expect_error"] = expect_error[0]
            self.manifest[name]["error_words"] = list(expect_error[1:])


def edges(w):
    """Sizes at the edges: windows as large as the input, an LRN window over all channels,
    one-input Concat, bilinear UpSampling by an even scale."""
    d = S.var("data")
    w.symbol("edge_sizes", S.Group([
        S.Pooling(d, kernel=(4, 5), pool_type="avg", name="p_whole"),
        S.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="sum",
                  pooling_convention="full", name="p_sum_pad_full"),
        S.LRN(d, nsize=3, alpha=0.1, beta=0.75, knorm=1.5, name="lrn_all_channels"),
        S.Concat(d, dim=1, num_args=1, name="concat_one"),
        S.UpSampling(d, scale=4, sample_type="bilinear", num_filter=3, name="up_bilinear4"),
        S.softmax(S.Flatten(d), axis=0, name="softmax_2d_axis0"),
        S.SoftmaxOutput(S.Reshape(d, shape=(0, 0, -1)), S.var("label"), preserve_shape=True,
                        name="softmax_keep_3d")]),
        {"data": x_((2, 3, 4, 5), 2.0)}, label_shapes={"label": (2, 3)},
        note="pooling windows the size of the input, LRN nsize = the channel count, "
             "Concat of one input, bilinear UpSampling by 4, softmaxes of 2-D and 3-D blobs")


def more_geometry(w):
    """Deconvolution's target_shape with groups (MXNet's own kernels: oneDNN refuses
    target_shape geometries, see tools/mxnet_reference.py; not dilated, where MXNet's own CPU
    kernel is wrong), fractional resize scales (MXNet truncates the float32 product) and
    scales given beside height and width."""
    d = S.var("data")
    w.symbol("deconv_target_group", S.Deconvolution(
        d, num_filter=4, kernel=(3, 3), stride=(2, 2), num_group=2, target_shape=(10, 12),
        no_bias=False, name="deconv_tg"), {"data": x_((1, 4, 5, 6))},
        native=True, note="target_shape with num_group 2 and a bias")
    w.symbol("resize_fractional", S.Group([
        S.contrib.BilinearResize2D(d, scale_height=0.35, scale_width=1.15, name="resize_frac"),
        S.contrib.BilinearResize2D(d, height=7, width=9, scale_height=2.0, scale_width=2.0,
                                   name="resize_scale_wins")]),
        {"data": x_((1, 2, 10, 10))},
        note="scales 0.35 and 1.15 of 10 (3 and 11 rows), scales beside height / width")


def without_caffe_ops(w):
    """Ops of models that have no Caffe conversion: refused naming the op and the node (and,
    for the divisions, why)."""
    d = S.var("data")
    w.symbol("refused_zeros_like", S.zeros_like(d, name="zeros") + d,
             {"data": x_((1, 2, 3))}, note="zeros_like", expect_error=["zeros", "zeros_like"])
    w.symbol("refused_broadcast_div_spatial",
             S.broadcast_div(d, S.var("other"), name="bc_div_spatial"),
             {"data": x_((2, 3, 4, 5)), "other": x_((2, 1, 4, 5))},
             note="broadcast_div by a spatial map (N, 1, H, W): no Caffe broadcast",
             expect_error=["bc_div_spatial", "broadcast_div", "shapes"])


def with_zeros(shape, zeros, scale=1.0):
    """An input with ``zeros`` of its values set to 0 (signed zeros alternating)."""
    x = x_(shape, scale).reshape(-1)
    at = ref.RNG.choice(x.size, zeros, replace=False)
    x[at] = np.where(np.arange(zeros) % 2, -0.0, 0.0)
    return x.reshape(shape)


def divisions(w):
    """Division of one blob by another (elemwise_div, the ``/`` operator, broadcast_div by and
    of an (N, C, 1, 1) operand), divisors with zeros and numerators with zeros."""
    d, o = S.var("data"), S.var("other")
    w.symbol("div_equal", S.Group([
        S.elemwise_div(d, o, name="el_div"), S.broadcast_div(o, d, name="bc_div_same"),
        S.elemwise_div(S.abs(d) + 0.25, S.abs(o) + 0.5, name="el_div_positive"),
        d / o, S.elemwise_div(o, o, name="el_div_self")]),
        {"data": with_zeros((2, 3, 4, 5), 6, 2.0), "other": with_zeros((2, 3, 4, 5), 5)},
        note="elemwise_div, broadcast_div of equal shapes, the / operator; zeros in both, so "
             "+-inf, signed zeros and (o / o) NaN")
    w.symbol("div_channels", S.Group([
        S.broadcast_div(d, o, name="bc_div_1c11"), S.broadcast_div(o, d, name="bc_div_rev")]),
        {"data": x_((2, 3, 4, 5)), "other": with_zeros((1, 3, 1, 1), 1)},
        note="broadcast_div by and of a (1, C, 1, 1) operand, one of its values 0")
    w.symbol("div_batch_channels", S.broadcast_div(d, o, name="bc_div_nc11"),
             {"data": x_((2, 3, 4, 5)), "other": x_((2, 3, 1, 1), 0.5)},
             note="broadcast_div by an (N, C, 1, 1) operand")
    with_inf = with_zeros((2, 3, 4), 4, 2.0)
    with_inf.reshape(-1)[-2:] = [np.inf, -np.inf]
    w.symbol("div_scalars", S.Group([
        S._internal._rdiv_scalar(d, scalar=2.5, name="rdiv"),
        S._internal._rdiv_scalar(d, scalar=0.0, name="rdiv_zero"),
        S._internal._div_scalar(d, scalar=0.0, name="div_zero")]),
        {"data": with_inf}, note="a scalar over a blob, and divisions by and of the scalar 0, "
                                 "of an input with signed zeros and infinities")


def indices(shape, input_dim):
    """Integer indices (as floats) that take in the first and the last row."""
    v = ref.RNG.randint(0, input_dim, shape).astype(np.float32).reshape(-1)
    v[0], v[-1] = 0, input_dim - 1
    return v.reshape(shape)


def embeddings(w):
    """Embedding of indices of 1 to 3 axes (the first and the last row among them)."""
    d = S.var("data")
    w.symbol("embedding_2d", S.Embedding(d, input_dim=10, output_dim=4, name="emb_2d"),
             {"data": indices((2, 3), 10)}, note="Embedding of (N, T) indices")
    w.symbol("embedding_1d", S.Group([
        S.Embedding(d, input_dim=7, output_dim=3, name="emb_1d"),
        S.Embedding(d, input_dim=7, output_dim=1, name="emb_1d_width1")]),
        {"data": indices((9,), 7)}, note="Embedding of a vector of indices (repeated ones), "
                                         "output_dim 1")
    w.symbol("embedding_3d", S.Embedding(d, input_dim=6, output_dim=5, name="emb_3d"),
             {"data": indices((2, 2, 3), 6)}, note="Embedding of (N, A, B) indices")


def instance_norms(w):
    """InstanceNorm of 3-D to 5-D blobs; a plane of one value (variance 0: beta)."""
    d = S.var("data")
    w.symbol("instance_norm_4d", S.Group([
        S.InstanceNorm(d, name="inorm_default_eps"),
        S.InstanceNorm(d, eps=1e-5, name="inorm_eps")]), {"data": x_((2, 3, 4, 5), 2.0)},
        note="InstanceNorm of an NCHW blob, MXNet's eps 1e-3 and 1e-5")
    w.symbol("instance_norm_3d", S.InstanceNorm(d, eps=0.1, name="inorm_3d"),
             {"data": x_((2, 4, 6))}, note="InstanceNorm of an (N, C, L) blob, eps 0.1")
    w.symbol("instance_norm_5d", S.InstanceNorm(d, name="inorm_5d"),
             {"data": x_((1, 2, 3, 4, 2), 3.0)}, note="InstanceNorm of an NCDHW blob")
    w.symbol("instance_norm_one_value", S.InstanceNorm(d, name="inorm_one"),
             {"data": x_((2, 3, 1, 1))}, note="planes of one value: the output is beta")


def pads(w):
    """Pad in its three modes, pads that differ before and after, 4-D and 5-D; reflect as
    wide as the input allows."""
    d = S.var("data")
    w.symbol("pad_4d", S.Group([
        S.Pad(d, mode="constant", pad_width=(0, 0, 0, 0, 1, 2, 0, 3), name="pad_zero"),
        S.Pad(d, mode="constant", constant_value=-2.5, pad_width=(0, 0, 0, 0, 2, 1, 1, 1),
              name="pad_value"),
        S.Pad(d, mode="edge", pad_width=(0, 0, 0, 0, 3, 1, 2, 0), name="pad_edge"),
        S.Pad(d, mode="reflect", pad_width=(0, 0, 0, 0, 1, 3, 2, 1), name="pad_reflect"),
        S.Pad(d, mode="reflect", pad_width=(0, 0, 0, 0, 0, 0, 1, 0), name="pad_reflect_one"),
        S.Pad(d, mode="edge", pad_width=(0, 0, 0, 0, 0, 0, 0, 0), name="pad_none")]),
        {"data": x_((2, 3, 4, 5))},
        note="constant (0 and -2.5), edge and reflect pads, uneven, one side only, none")
    w.symbol("pad_5d", S.Group([
        S.Pad(d, mode="constant", constant_value=0.75, pad_width=(0, 0, 0, 0, 1, 0, 0, 2, 1, 1),
              name="pad5_value"),
        S.Pad(d, mode="edge", pad_width=(0, 0, 0, 0, 2, 1, 1, 0, 0, 3), name="pad5_edge"),
        S.Pad(d, mode="reflect", pad_width=(0, 0, 0, 0, 1, 1, 2, 0, 0, 4), name="pad5_reflect")]),
        {"data": x_((1, 2, 3, 4, 5))}, note="Pad of an NCDHW blob in the three modes")
    w.symbol("pad_reflect_widest", S.Pad(d, mode="reflect", pad_width=(0, 0, 0, 0, 3, 3, 4, 4),
                                         name="pad_reflect_widest"),
             {"data": x_((1, 2, 4, 5))}, note="reflect pads of the input's size less one")


def max_reductions(w):
    """max over one axis, over several (next to each other or not), over all; keepdims,
    exclude, max_axis; values with ties."""
    d = S.var("data")
    ties = np.round(x_((2, 3, 4, 5), 2.0))
    w.symbol("max_axes", S.Group([
        S.max(d, axis=(2, 3), name="max_hw"),
        S.max(d, axis=1, keepdims=True, name="max_c_keep"),
        S.max(d, name="max_all"),
        S.max(d, keepdims=True, name="max_all_keep"),
        S.max(d, axis=-1, name="max_last"),
        S.max(d, axis=(1, 3), name="max_c_w"),
        S.max(d, axis=(0, 1), exclude=True, keepdims=True, name="max_exclude"),
        S.max(d, axis=0, name="max_batch"),
        S.max_axis(d, axis=2, name="max_axis_h")]), {"data": ties},
        note="max over axes (with ties): spatial, channels, all, last, apart, exclude, batch")
    negative = (x_((3, 5), 3.0) - 10.0).astype(np.float16).astype(np.float32)
    w.symbol("max_2d", S.Group([S.max(d, axis=0, name="max_rows"),
                                S.max(d, axis=1, keepdims=True, name="max_cols_keep")]),
             {"data": negative}, note="max of an (N, C) blob of negative values")


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join("tests", "fixtures", "mxnet_ops")
    if os.environ.get("MXNET_SUBGRAPH_BACKEND") != "NONE":
        sys.exit("run with MXNET_SUBGRAPH_BACKEND=NONE (see tools/mxnet_reference.py)")
    mx.random.seed(29)
    w = OpWriter(out)
    for part in (convolutions, deconvolutions, poolings, batchnorms, dense, activations,
                 softmaxes, shapes, reductions, arithmetic, normalisations, passthrough,
                 without_caffe_ops, divisions, edges, more_geometry, embeddings, instance_norms,
                 pads,                 max_reductions):
        # each part's numbers of their own, so that a case added changes no other part's
        ref.RNG = np.random.RandomState(zlib.crc32(part.__name__.encode()))
        part(w)
    w.save_manifest()


if __name__ == "__main__":
    main(sys.argv)
