"""The environment variables that turn a feature on or off (``PYCAFFE_LITE_FOLD=0`` and the
like), all read the same way by :func:`switch`."""

import logging
import os

OFF = ("0", "false", "no", "off")
ON = ("1", "true", "yes", "on")


def switch(name, default=True):
    """Whether the environment variable ``name`` turns its feature on: ``default`` where it is
    unset or empty; off for 0, false, no or off, on for 1, true, yes or on (any case); any
    other value keeps ``default``, with a warning naming the variable."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if value.lower() in OFF:
        return False
    if value.lower() in ON:
        return True
    logging.getLogger("pycaffe_lite").warning(
        "%s=%r is none of %s; it is ignored (the feature stays %s)", name, value,
        ", ".join(ON + OFF), "on" if default else "off")
    return default
