#!/usr/bin/env python
"""MXNet to Caffe conversion: the same as ``pycaffe-lite import_mxnet`` (same arguments)."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["import_mxnet"] + sys.argv[1:]))
