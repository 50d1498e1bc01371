"""Data-pipeline benchmark: images/s delivered by the Data layer from LMDB with the transform.

Two cases (the consumer does nothing but take batches, so this is the input pipeline's own
ceiling):

- raw: 1x28x28 MNIST records (the LeNet example), scale 0.00390625 (target >= 20,000 img/s);
- jpeg: encoded 256x256 JPEG records, TRAIN phase, crop 227 + mirror + mean_file
  (target >= 400 img/s on 2 cores).

Usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_data.py
    [--seconds 5] [--batch 64] [--threads N] [--case ...]
(--threads sets PYCAFFE_LITE_DATA_THREADS; default: the layer's own choice).
"""

import argparse
import io
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import bench_env  # noqa: E402
import pycaffe_lite  # noqa: E402
from pycaffe_lite.data import compute_image_mean, convert_mnist, open_db  # noqa: E402
from pycaffe_lite.data.db import NEW  # noqa: E402
from pycaffe_lite.proto import caffe_pb2  # noqa: E402
from pycaffe_lite.testing import empty_blobs, make_layer  # noqa: E402

MNIST = os.path.join(os.path.dirname(HERE), "models", "lenet", "mnist5k")


def _synthetic_jpegs(db_path, n, size=256, seed=0):
    """n photo-like JPEGs (smooth colour fields, edges and some noise), quality 90."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    with open_db(db_path, "lmdb", NEW) as db:
        txn = db.transaction()
        for i in range(n):
            a = rng.uniform(0, 6, 6)
            img = np.stack([127 + 100 * np.sin(a[c] * xx + a[c + 3] * yy + c) for c in range(3)],
                           axis=-1)
            img[int(rng.integers(0, size)):, :, int(rng.integers(0, 3))] *= 0.5
            img += rng.normal(0, 8, img.shape)
            buf = io.BytesIO()
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG",
                                                                        quality=90)
            d = caffe_pb2.Datum(data=buf.getvalue(), label=i % 1000, encoded=True)
            txn.put(b"%08d" % i, d.SerializeToString())
        txn.commit()


def _measure(text, seconds, phase=caffe_pb2.TRAIN):
    layer = make_layer(text, dtype=np.float32, phase=phase)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    batch = top[0].shape[0]
    for _ in range(3):  # warm up (threads started, first batches ready)
        layer.Forward([], top)
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        layer.Forward([], top)
        n += batch
    elapsed = time.perf_counter() - start
    threads = layer._prefetcher.threads
    layer.close()
    return n / elapsed, tuple(top[0].shape), threads


def bench_raw(tmp, seconds, batch):
    db = os.path.join(tmp, "mnist_train_lmdb")
    convert_mnist(os.path.join(MNIST, "train-images-idx3-ubyte.gz"),
                  os.path.join(MNIST, "train-labels-idx1-ubyte.gz"), db, progress=False)
    text = ('name: "mnist" type: "Data" transform_param { scale: 0.00390625 } '
            'data_param { source: "%s" batch_size: %d backend: LMDB }' % (db, batch))
    return _measure(text, seconds)


def bench_jpeg(tmp, seconds, batch, n=512):
    db = os.path.join(tmp, "jpeg_lmdb")
    _synthetic_jpegs(db, n)
    mean = os.path.join(tmp, "mean.binaryproto")
    compute_image_mean(db, "lmdb", mean, progress=False)
    text = ('name: "data" type: "Data" transform_param { crop_size: 227 mirror: true '
            'mean_file: "%s" } data_param { source: "%s" batch_size: %d backend: LMDB }'
            % (mean, db, batch))
    return _measure(text, seconds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--case", choices=("raw", "jpeg", "all"), default="all")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["PYCAFFE_LITE_DATA_THREADS"] = str(args.threads)
    bench_env.report()
    pycaffe_lite.set_random_seed(0)
    print("cpu cores: %s" % os.cpu_count())
    with tempfile.TemporaryDirectory() as tmp:
        if args.case in ("raw", "all"):
            rate, shape, threads = bench_raw(tmp, args.seconds, args.batch)
            print("raw 1x28x28 LMDB, scale:                 %10.0f images/s  (top %s, %d "
                  "thread%s; target >= 20000)" % (rate, shape, threads, "s"[threads == 1:]))
        if args.case in ("jpeg", "all"):
            rate, shape, threads = bench_jpeg(tmp, args.seconds, args.batch)
            print("JPEG 256x256 LMDB, crop 227+mirror+mean:  %10.0f images/s  (top %s, %d "
                  "thread%s; target >= 400)" % (rate, shape, threads, "s"[threads == 1:]))
    bench_env.print_load("end")


if __name__ == "__main__":
    main()
