"""``python -m pycaffe_lite``: the ``pycaffe-lite`` command line."""

import sys

from .cli import main

sys.exit(main())
