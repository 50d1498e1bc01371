"""BVLC Caffe's own C++ tests of its data layers, transformer, I/O and fillers
(``src/caffe/test/test_*.cpp``), as checks of pycaffe-lite: BVLC's inputs and expected values
as data, the references computed here by hand."""

import math

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.fillers import fill
from pycaffe_lite.proto import caffe_pb2


def _filled(shape, seed=0, **kw):
    b = Blob(shape, np.float32)
    fill(b, caffe_pb2.FillerParameter(**kw), np.random.default_rng(seed))
    return b.data


# ---- fillers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [6, 7])
def test_bilinear_filler_odd_and_even_kernels(k):
    # BVLC test_filler.cpp BilinearFillerTest TestFillOdd (7) and TestFillEven (6): every
    # K x K kernel of a (1000, 2, K, K) blob is the product of w(x) = 1 - |x / f - c|, with
    # f = ceil(K / 2) and c = (K - 1) / (2 f): a kernel symmetric about its centre
    f = math.ceil(k / 2)
    c = (k - 1) / (2.0 * f)
    w = 1 - np.abs(np.arange(k) / f - c)
    d = _filled((1000, 2, k, k), type="bilinear")
    np.testing.assert_allclose(d, np.broadcast_to(np.outer(w, w), d.shape), atol=1e-6)
    np.testing.assert_allclose(d[0, 0], d[0, 0, ::-1, ::-1], atol=1e-6)
