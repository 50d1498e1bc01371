#!/usr/bin/env python
"""The SSD fork's ``convert_annoset`` tool, as a script: the same as
``pycaffe-lite convert_annoset ...`` (same arguments)."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert_annoset"] + sys.argv[1:]))
