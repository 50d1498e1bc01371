"""The cases of :mod:`.onnx_backend_table` that are refused at import, by the pattern their
error message must match (naming the node, input or output and why)."""

REFUSED = {
    r"ONNX input '[^']+' has an axis of size": '''
        test_castlike_BFLOAT16_to_FLOAT test_castlike_BFLOAT16_to_FLOAT_expanded
        test_castlike_DOUBLE_to_FLOAT test_castlike_DOUBLE_to_FLOAT16
        test_castlike_DOUBLE_to_FLOAT16_expanded test_castlike_DOUBLE_to_FLOAT_expanded
        test_castlike_FLOAT16_to_DOUBLE test_castlike_FLOAT16_to_DOUBLE_expanded
        test_castlike_FLOAT16_to_FLOAT test_castlike_FLOAT16_to_FLOAT_expanded
        test_castlike_FLOAT_to_BFLOAT16 test_castlike_FLOAT_to_BFLOAT16_expanded
        test_castlike_FLOAT_to_DOUBLE test_castlike_FLOAT_to_DOUBLE_expanded
        test_castlike_FLOAT_to_FLOAT16 test_castlike_FLOAT_to_FLOAT16_expanded
        test_reduce_l1_empty_set test_reduce_l1_empty_set_expanded test_reduce_l2_empty_set
        test_reduce_l2_empty_set_expanded test_reduce_log_sum_empty_set
        test_reduce_log_sum_empty_set_expanded test_reduce_log_sum_exp_empty_set
        test_reduce_log_sum_exp_empty_set_expanded test_reduce_max_empty_set
        test_reduce_max_empty_set_bool test_reduce_min_empty_set test_reduce_sum_empty_set
        test_reduce_sum_empty_set_non_reduced_axis_zero test_reduce_sum_square_empty_set
        test_reduce_sum_square_empty_set_expanded test_reshape_allowzero_reordered
        test_split_zero_size_splits_opset13 test_split_zero_size_splits_opset18
        test_tril_zero test_triu_zero
    '''.split(),
    r"ONNX input '[^']+' is of type bool; a Caffe blob holds floats": '''
        test_training_dropout test_training_dropout_default
        test_training_dropout_default_mask test_training_dropout_mask
        test_training_dropout_zero_ratio test_training_dropout_zero_ratio_mask
    '''.split(),
    r"ONNX input '[^']+' is of type float[48]_\w+; a Caffe blob holds floats": '''
        test_cast_FLOAT4E2M1_to_FLOAT test_cast_FLOAT4E2M1_to_FLOAT16
        test_cast_FLOAT8E4M3FNUZ_to_FLOAT test_cast_FLOAT8E4M3FNUZ_to_FLOAT16
        test_cast_FLOAT8E4M3FN_to_FLOAT test_cast_FLOAT8E4M3FN_to_FLOAT16
        test_cast_FLOAT8E5M2FNUZ_to_FLOAT test_cast_FLOAT8E5M2FNUZ_to_FLOAT16
        test_cast_FLOAT8E5M2_to_FLOAT test_cast_FLOAT8E5M2_to_FLOAT16
        test_cast_e8m0_FLOAT8E8M0_to_FLOAT test_cast_e8m0_FLOAT8E8M0_to_FLOAT16
        test_castlike_FLOAT16_to_FLOAT4E2M1 test_castlike_FLOAT16_to_FLOAT4E2M1_expanded
        test_castlike_FLOAT16_to_FLOAT8E4M3FN test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ
        test_castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded
        test_castlike_FLOAT16_to_FLOAT8E4M3FN_expanded test_castlike_FLOAT16_to_FLOAT8E5M2
        test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ
        test_castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded
        test_castlike_FLOAT16_to_FLOAT8E5M2_expanded test_castlike_FLOAT4E2M1_to_FLOAT
        test_castlike_FLOAT4E2M1_to_FLOAT16 test_castlike_FLOAT4E2M1_to_FLOAT16_expanded
        test_castlike_FLOAT4E2M1_to_FLOAT_expanded test_castlike_FLOAT8E4M3FNUZ_to_FLOAT
        test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16
        test_castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded
        test_castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded test_castlike_FLOAT8E4M3FN_to_FLOAT
        test_castlike_FLOAT8E4M3FN_to_FLOAT16 test_castlike_FLOAT8E4M3FN_to_FLOAT16_expanded
        test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded test_castlike_FLOAT8E5M2FNUZ_to_FLOAT
        test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16
        test_castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded
        test_castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded test_castlike_FLOAT8E5M2_to_FLOAT
        test_castlike_FLOAT8E5M2_to_FLOAT16 test_castlike_FLOAT8E5M2_to_FLOAT16_expanded
        test_castlike_FLOAT8E5M2_to_FLOAT_expanded test_castlike_FLOAT_to_FLOAT4E2M1
        test_castlike_FLOAT_to_FLOAT4E2M1_expanded test_castlike_FLOAT_to_FLOAT8E4M3FN
        test_castlike_FLOAT_to_FLOAT8E4M3FNUZ test_castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded
        test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded test_castlike_FLOAT_to_FLOAT8E5M2
        test_castlike_FLOAT_to_FLOAT8E5M2FNUZ test_castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded
        test_castlike_FLOAT_to_FLOAT8E5M2_expanded
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded
        test_castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded
        test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN
        test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ
        test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded
        test_castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded
        test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2
        test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ
        test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded
        test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded
    '''.split(),
    r"ONNX input '[^']+' is of type int": '''
        test_add_int16 test_add_int8 test_cast_INT2_to_FLOAT test_cast_INT2_to_FLOAT16
        test_cast_INT2_to_INT8 test_cast_INT4_to_FLOAT test_cast_INT4_to_FLOAT16
        test_cast_INT4_to_INT8 test_castlike_INT2_to_FLOAT test_castlike_INT2_to_FLOAT16
        test_castlike_INT2_to_FLOAT16_expanded test_castlike_INT2_to_FLOAT_expanded
        test_castlike_INT2_to_INT8 test_castlike_INT2_to_INT8_expanded
        test_castlike_INT4_to_FLOAT test_castlike_INT4_to_FLOAT16
        test_castlike_INT4_to_FLOAT16_expanded test_castlike_INT4_to_FLOAT_expanded
        test_castlike_INT4_to_INT8 test_castlike_INT4_to_INT8_expanded
        test_constantofshape_float_ones test_constantofshape_int_shape_zero
        test_constantofshape_int_zeros test_div_int16 test_div_int32_trunc test_div_int8
        test_mul_int16 test_mul_int8 test_pow_types_int32_float32 test_pow_types_int32_int32
        test_pow_types_int64_float32 test_pow_types_int64_int64
        test_range_int32_type_negative_delta test_sub_int16 test_sub_int8
    '''.split(),
    r"ONNX input '[^']+' is of type object; a Caffe blob holds floats": '''
        test_equal_string test_equal_string_broadcast
    '''.split(),
    r"ONNX input '[^']+' is of type uint": '''
        test_add_uint16 test_add_uint8 test_cast_UINT2_to_FLOAT test_cast_UINT2_to_FLOAT16
        test_cast_UINT2_to_UINT8 test_cast_UINT4_to_FLOAT test_cast_UINT4_to_FLOAT16
        test_cast_UINT4_to_UINT8 test_castlike_UINT2_to_FLOAT test_castlike_UINT2_to_FLOAT16
        test_castlike_UINT2_to_FLOAT16_expanded test_castlike_UINT2_to_FLOAT_expanded
        test_castlike_UINT2_to_UINT8 test_castlike_UINT2_to_UINT8_expanded
        test_castlike_UINT4_to_FLOAT test_castlike_UINT4_to_FLOAT16
        test_castlike_UINT4_to_FLOAT16_expanded test_castlike_UINT4_to_FLOAT_expanded
        test_castlike_UINT4_to_UINT8 test_castlike_UINT4_to_UINT8_expanded test_div_uint16
        test_div_uint32 test_div_uint64 test_div_uint8 test_mul_uint16 test_mul_uint8
        test_sub_uint16 test_sub_uint32 test_sub_uint64 test_sub_uint8
    '''.split(),
    r"ONNX node '[^']+' \(op BatchNormalization\): training_mode batch normalization does not": '''
        test_batchnorm_epsilon_training_mode test_batchnorm_example_training_mode
    '''.split(),
    r"ONNX node '[^']+' \(op Cast(Like)?\): a cast from \w+ to \w+ rounds the values": '''
        test_cast_DOUBLE_to_FLOAT16 test_cast_FLOAT16_to_FLOAT4E2M1
        test_cast_FLOAT16_to_FLOAT8E4M3FN test_cast_FLOAT16_to_FLOAT8E4M3FNUZ
        test_cast_FLOAT16_to_FLOAT8E5M2 test_cast_FLOAT16_to_FLOAT8E5M2FNUZ
        test_cast_FLOAT_to_BFLOAT16 test_cast_FLOAT_to_FLOAT16 test_cast_FLOAT_to_FLOAT4E2M1
        test_cast_FLOAT_to_FLOAT8E4M3FN test_cast_FLOAT_to_FLOAT8E4M3FNUZ
        test_cast_FLOAT_to_FLOAT8E5M2 test_cast_FLOAT_to_FLOAT8E5M2FNUZ
        test_cast_e8m0_FLOAT16_to_FLOAT8E8M0 test_cast_e8m0_FLOAT_to_FLOAT8E8M0
        test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN
        test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ
        test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2
        test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ
        test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN
        test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ
        test_cast_no_saturate_FLOAT_to_FLOAT8E5M2
        test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ
        test_causal_conv_with_state_silu_fp16_expanded
        test_flexattention_fp16_expanded_ver26
    '''.split(),
    r"ONNX node '[^']+' \(op Cast(Like)?\): a cast from float(16|32) to u?int[24] truncates": '''
        test_cast_FLOAT16_to_INT2 test_cast_FLOAT16_to_INT4 test_cast_FLOAT16_to_UINT2
        test_cast_FLOAT16_to_UINT4 test_cast_FLOAT_to_INT2 test_cast_FLOAT_to_INT4
        test_cast_FLOAT_to_UINT2 test_cast_FLOAT_to_UINT4 test_castlike_FLOAT16_to_INT2
        test_castlike_FLOAT16_to_INT2_expanded test_castlike_FLOAT16_to_INT4
        test_castlike_FLOAT16_to_INT4_expanded test_castlike_FLOAT16_to_UINT2
        test_castlike_FLOAT16_to_UINT2_expanded test_castlike_FLOAT16_to_UINT4
        test_castlike_FLOAT16_to_UINT4_expanded test_castlike_FLOAT_to_INT2
        test_castlike_FLOAT_to_INT2_expanded test_castlike_FLOAT_to_INT4
        test_castlike_FLOAT_to_INT4_expanded test_castlike_FLOAT_to_UINT2
        test_castlike_FLOAT_to_UINT2_expanded test_castlike_FLOAT_to_UINT4
        test_castlike_FLOAT_to_UINT4_expanded
    '''.split(),
    r"ONNX node '[^']+' \(op Clip\): min": '''
        test_clip_min_greater_than_max
    '''.split(),
    r"ONNX node '[^']+' \(op Erf\): Caffe has no erf layer": '''
        test_erf
    '''.split(),
    r"ONNX node '[^']+' \(op MaxPool\): its Indices output": '''
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
        test_causal_conv_with_state_kernel_size_one_expanded test_slice_start_out_of_bounds
    '''.split(),
    r"ONNX node '[^']+' \(op Split\): its output '[^']+' has an axis of size 0": '''
        test_rotary_embedding_3d_input_expanded test_rotary_embedding_expanded
        test_rotary_embedding_interleaved_expanded
        test_rotary_embedding_no_position_ids_expanded
        test_rotary_embedding_no_position_ids_interleaved_expanded
    '''.split(),
    r"ONNX output '[^']+' is a constant; a Caffe net cannot output a constant": '''
        test_constant test_shape test_shape_clip_end test_shape_clip_start test_shape_end_1
        test_shape_end_negative_1 test_shape_example test_shape_start_1
        test_shape_start_1_end_2 test_shape_start_1_end_negative_1
        test_shape_start_greater_than_end test_shape_start_negative_1
    '''.split(),
}
