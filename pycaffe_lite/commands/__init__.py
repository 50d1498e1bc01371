"""Subcommands of the ``pycaffe-lite`` command line.

Each module here defines ``COMMANDS``: a list of ``(name, help, add_arguments, run)`` where
``add_arguments(parser)`` declares the flags and ``run(args)`` returns an exit code. The CLI
discovers the modules, so adding a command never touches the CLI itself.
"""

import importlib
import pkgutil


def all_commands():
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(__name__ + "." + info.name)
        found.extend(getattr(module, "COMMANDS", []))
    return found
