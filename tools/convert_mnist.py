#!/usr/bin/env python
"""Caffe's ``convert_mnist`` tool, as a script: the same as
``pycaffe-lite convert_mnist ...`` (same arguments)."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert_mnist"] + sys.argv[1:]))
