#!/usr/bin/env python
"""Caffe's tools/upgrade_solver_proto_text, as a script.

Same as ``pycaffe-lite upgrade_solver_proto_text IN OUT``.
"""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["upgrade_solver_proto_text"] + sys.argv[1:]))
