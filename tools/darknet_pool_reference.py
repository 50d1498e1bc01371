#!/usr/bin/env python3
"""Write the outputs of AlexeyAB's Darknet for ``[local_avgpool]`` and ``[maxpool]
maxpool_depth`` cases (and ``out_channels`` without it), which ``tests/test_darknet_pools.py``
reads (OpenCV's Darknet importer does not read ``[local_avgpool]`` and ignores
``maxpool_depth``).

Needs Darknet's shared library, built on the CPU from AlexeyAB/darknet's source
(``make GPU=0 CUDNN=0 OPENCV=0 LIBSO=1``); no pycaffe-lite, only NumPy::

    python3 tools/darknet_pool_reference.py /path/to/libdarknet.so tests/fixtures/darknet_pools

Each case is a ``.cfg`` of one section on a small random input (no ``.weights``: these
layers have none). Darknet runs it through ``load_network_custom`` and
``network_predict_ptr`` (the CPU forward pass); the output's size is the layer's as
``make_maxpool_layer`` computes it. Written: ``NAME.cfg``, and ``NAME.npz`` with ``x`` (the
input, 1 x C x H x W) and ``y`` (Darknet's output, 1 x C' x H' x W').
"""

import ctypes
import os
import sys

import numpy as np

# (name, [net] width, height, channels, the section)
CASES = [
    ("avg_s3_default_pad", 6, 5, 4, "[local_avgpool]\nsize=3\nstride=1\n"),
    ("avg_s2_stride2", 8, 6, 3, "[local_avgpool]\nsize=2\nstride=2\n"),
    ("avg_s2_stride1", 7, 7, 2, "[local_avgpool]\nsize=2\nstride=1\n"),
    ("avg_s3_stride2_odd", 7, 9, 2, "[local_avgpool]\nsize=3\nstride=2\n"),
    ("avg_s3_pad0", 7, 6, 2, "[local_avgpool]\nsize=3\nstride=1\npadding=0\n"),
    ("avg_s5_pad4", 6, 7, 2, "[local_avgpool]\nsize=5\nstride=1\npadding=4\n"),
    ("avg_stride_xy", 9, 8, 2, "[local_avgpool]\nsize=3\nstride_x=2\nstride_y=1\n"),
    ("avg_s4_stride3_pad2", 10, 11, 2, "[local_avgpool]\nsize=4\nstride=3\npadding=2\n"),
    ("depth_all", 5, 4, 6, "[maxpool]\nmaxpool_depth=1\n"),
    ("depth_out2", 5, 4, 6, "[maxpool]\nmaxpool_depth=1\nout_channels=2\nsize=2\nstride=2\n"),
    ("depth_out3_uneven", 4, 3, 7, "[maxpool]\nmaxpool_depth=1\nout_channels=3\n"),
    ("depth_out4_of_5", 4, 3, 5, "[maxpool]\nmaxpool_depth=1\nout_channels=4\n"),
    ("depth_out_all", 3, 3, 4, "[maxpool]\nmaxpool_depth=1\nout_channels=4\n"),
    ("max_out_channels_unused", 6, 5, 3, "[maxpool]\nsize=2\nstride=2\nout_channels=2\n"),
]


def output_shape(c, h, w, text):
    """make_maxpool_layer's out_c, out_h, out_w."""
    keys = dict(line.split("=") for line in text.splitlines()[1:] if "=" in line)
    if int(keys.get("maxpool_depth", 0)):
        return int(keys.get("out_channels", 1)), h, w
    stride = int(keys.get("stride", 1))
    sx, sy = int(keys.get("stride_x", stride)), int(keys.get("stride_y", stride))
    size = int(keys.get("size", stride))
    padding = int(keys.get("padding", size - 1))
    return c, (h + padding - size) // sy + 1, (w + padding - size) // sx + 1


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    lib = ctypes.CDLL(os.path.abspath(argv[1]))
    lib.load_network_custom.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                        ctypes.c_int)
    lib.load_network_custom.restype = ctypes.c_void_p
    lib.network_predict_ptr.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_float))
    lib.network_predict_ptr.restype = ctypes.POINTER(ctypes.c_float)
    out = argv[2]
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(7)
    for name, w, h, c, section in CASES:
        cfg = os.path.join(out, name + ".cfg")
        with open(cfg, "w") as f:
            f.write("[net]\nwidth=%d\nheight=%d\nchannels=%d\n\n%s" % (w, h, c, section))
        # values of a few bits (exact in float32 sums), ties among them
        x = (rng.randint(-64, 64, (1, c, h, w)) / 8.0).astype(np.float32)
        net = lib.load_network_custom(cfg.encode(), b"", 0, 1)
        ptr = lib.network_predict_ptr(net, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        shape = (1,) + output_shape(c, h, w, section)
        y = np.ctypeslib.as_array(ptr, (int(np.prod(shape)),)).reshape(shape).copy()
        np.savez(os.path.join(out, name + ".npz"), x=x, y=y)
        print("%-22s %s -> %s" % (name, x.shape, y.shape))


if __name__ == "__main__":
    main(sys.argv)
