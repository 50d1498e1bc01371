#!/usr/bin/env python
"""Caffe's python/draw_net.py, as a script: same as ``pycaffe-lite draw_net ...``."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["draw_net"] + sys.argv[1:]))
