"""Run exported PyTorch modules without pycaffe-lite: for each folder given, import its
model.py, load() it (weights.pt), feed inputs.npz (by the forward's argument order in
inputs.npz's ``__order__``) and compare with expected.npz. Importing pycaffe_lite is made
impossible first. Prints one JSON line: {folder: {output: [abs, rel]}}.

With ``--serve`` instead of folders: one process for many checks (PyTorch imported once).
Each line read from stdin is a JSON list of folders, answered by one JSON line as above, or
{"error": the traceback} (and the process goes on); it ends at the end of stdin."""

import importlib.abc
import importlib.util
import json
import os
import sys


class NoPycaffeLite(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pycaffe_lite" or name.startswith("pycaffe_lite."):
            raise ImportError("the exported module must not import pycaffe_lite")
        return None


_modules = [0]  # model.py files imported so far: each gets a name of its own


def check(folders):
    """{folder: {output: [abs, rel]}} for the exported modules in ``folders``."""
    import numpy as np
    import torch

    results = {}
    for folder in folders:
        _modules[0] += 1
        spec = importlib.util.spec_from_file_location("exported_%d" % _modules[0],
                                                      os.path.join(folder, "model.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.load()
        assert not model.training
        inputs = np.load(os.path.join(folder, "inputs.npz"))
        order = [str(n) for n in inputs["__order__"]]
        with torch.no_grad():
            out = model(*[torch.from_numpy(inputs[n]) for n in order])
        expected = np.load(os.path.join(folder, "expected.npz"))
        if not isinstance(out, dict):
            out = {expected.files[0]: out}
        diffs = {}
        for name in expected.files:
            ours = expected[name].astype(np.float64)
            theirs = out[name].numpy().astype(np.float64)
            if ours.shape != theirs.shape:
                diffs[name] = ["shape %s" % (theirs.shape,), None]
                continue
            d = float(np.abs(ours - theirs).max()) if ours.size else 0.0
            diffs[name] = [d, d / max(float(np.abs(ours).max()), 1e-30)]
        results[folder] = diffs
    assert not any(m == "pycaffe_lite" or m.startswith("pycaffe_lite.") for m in sys.modules)
    return results


def main(folders):
    sys.meta_path.insert(0, NoPycaffeLite())
    print(json.dumps(check(folders)))


def serve():
    import traceback

    sys.meta_path.insert(0, NoPycaffeLite())
    for line in sys.stdin:
        try:
            answer = check(json.loads(line))
        except Exception:  # the test that sent the folders shows it; the next may still run
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        main(sys.argv[1:])
