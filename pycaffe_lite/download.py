"""Download a model zoo entry's weights, as Caffe's ``scripts/download_model_binary.py`` does.

A zoo folder's ``readme.md`` starts with a front matter block::

    ---
    name: BVLC CaffeNet Model
    caffemodel: bvlc_reference_caffenet.caffemodel
    caffemodel_url: http://dl.caffe.berkeleyvision.org/bvlc_reference_caffenet.caffemodel
    sha1: 4c8d77deb20ea792f84eb5e6d0a11ca0a8660a46
    ---

:func:`download_model` fetches ``caffemodel_url`` (then each mirror, in order) into
``<folder>/<caffemodel>.part``, resuming a partial file with an HTTP ``Range`` request (also when
a server drops the connection mid-file), checks the SHA-1 and only then renames the file to
``<folder>/<caffemodel>``. A wrong SHA-1, an HTTP error or a host that cannot be reached moves
on to the next URL. The ``.part`` is kept across URLs: the next URL (a mirror of the same file)
resumes it, so a download stopped by Ctrl-C, or cut off on one server, goes on from where it
was, whichever URL answers. Only a file whose SHA-1 is wrong is thrown away (fetched once more
whole, from the same URL, when it was a resumed one). When no URL works the error names every
URL and why; bytes received so far stay in the ``.part`` for the next run.

A mirror is a URL of the file itself or, ending with ``/``, of a folder holding it.
"""

import glob
import hashlib
import http.client
import os
import sys
import time
import urllib.error
import urllib.request

from . import python_layers
from .proto import protoio
from .errors import CaffeError, ProtoError

REQUIRED = ("caffemodel", "caffemodel_url", "sha1")
CHUNK = 1 << 16
#: how often one URL is asked again after its connection broke off mid-file (with progress)
RESUME_ATTEMPTS = 5


def read_front_matter(readme):
    """The ``key: value`` pairs between the ``---`` lines that open ``readme``."""
    try:
        with open(readme, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise CaffeError("cannot read %s: %s (a model folder needs a readme.md with the "
                         "caffemodel, caffemodel_url and sha1 front matter)"
                         % (readme, exc.strerror or exc)) from None
    if not lines or lines[0].strip() != "---":
        raise CaffeError("%s:1: no front matter: the file must start with a '---' line, then "
                         "caffemodel:, caffemodel_url: and sha1: lines, then '---'" % readme)
    fields = {}
    for number, line in enumerate(lines[1:], start=2):
        if line.strip() == "---":
            break
        if not line.strip() or line.lstrip().startswith("#") or line.startswith((" ", "\t")):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise CaffeError("%s:%d: expected 'key: value' in the front matter, got %r"
                             % (readme, number, line))
        fields[key.strip()] = value.strip().strip("'\"")
    else:
        raise CaffeError("%s: the front matter has no closing '---' line" % readme)
    missing = [k for k in REQUIRED if not fields.get(k)]
    if missing:
        raise CaffeError("%s: the front matter lacks %s" % (readme, ", ".join(missing)))
    if os.path.basename(fields["caffemodel"]) != fields["caffemodel"]:
        raise CaffeError("%s: caffemodel must be a file name, got %r"
                         % (readme, fields["caffemodel"]))
    return fields


def python_modules(model_dir):
    """``[(prototxt, layer, module, class)]``: the Python layers of the nets in ``model_dir``
    (every ``*.prototxt`` that is a net; solver files are skipped). Nothing is imported."""
    found = []
    for path in sorted(glob.glob(os.path.join(model_dir, "*.prototxt"))):
        try:
            net = protoio.read_net_param(path)
        except ProtoError:
            continue  # a solver or another message: no layers
        found += [(path,) + entry for entry in python_layers.python_layers(net)]
    return found


def sha1_of(path):
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _urls(fields, mirrors):
    urls = [fields["caffemodel_url"]]
    for mirror in mirrors:
        urls.append(mirror + fields["caffemodel"] if mirror.endswith("/") else mirror)
    return urls


class _Progress:
    """``name: 12.0/30.0 MiB 40%`` on one line of a terminal (redrawn), or a line per tenth
    elsewhere."""

    def __init__(self, stream, name):
        self.stream = stream
        self.name = name
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = -1
        self.last = 0.0

    def update(self, done, total):
        if self.stream is None:
            return
        mib = done / 1048576.0
        if total:
            pct = int(100 * done / total)
            text = "%s: %.1f/%.1f MiB %3d%%" % (self.name, mib, total / 1048576.0, pct)
        else:
            pct, text = None, "%s: %.1f MiB" % (self.name, mib)
        if self.tty:
            now = time.monotonic()
            if now - self.last >= 0.1 or (total and done >= total):
                self.stream.write("\r" + text)
                self.stream.flush()
                self.last = now
        elif pct is not None and pct // 10 > self.shown:
            self.shown = pct // 10
            self.stream.write(text + "\n")
            self.stream.flush()

    def end(self):
        if self.stream is not None and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _fetch(url, part, timeout, progress):
    """Append ``url``'s bytes to ``part`` from its current size on (restarting when the server
    ignores the Range); the number of bytes received. Raises OSError, urllib and http.client
    errors."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "pycaffe-lite"})
    if have:
        request.add_header("Range", "bytes=%d-" % have)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the part is already whole
            exc.close()
            return 0
        raise
    with response:
        status = response.status
        length = response.headers.get("Content-Length")
        if have and status == 206:
            start = int(response.headers.get("Content-Range", "bytes 0-").split()[1]
                        .split("-")[0])
            if start != have:
                raise http.client.HTTPException("asked for bytes %d- and got bytes %d-"
                                                % (have, start))
            mode = "ab"
        else:
            have, mode = 0, "wb"  # a whole file: start again
        total = have + int(length) if length is not None else None
        received = 0
        with open(part, mode) as f:
            while True:
                block = response.read(CHUNK)
                if not block:
                    break
                f.write(block)
                received += len(block)
                progress.update(have + received, total)
            f.flush()
            os.fsync(f.fileno())
        if total is not None and have + received < total:
            raise http.client.IncompleteRead(b"", total - have - received)
    return received


def _describe(exc):
    if isinstance(exc, urllib.error.HTTPError):
        return "HTTP %d %s" % (exc.code, exc.reason)
    if isinstance(exc, urllib.error.URLError):
        return "cannot reach the host: %s" % (exc.reason,)
    if isinstance(exc, http.client.IncompleteRead):
        return "the connection closed %d bytes before the end" % exc.expected
    return "%s: %s" % (type(exc).__name__, exc)


def download_model(model_dir, mirrors=(), timeout=30.0, stream="stderr"):
    """Download the weights ``model_dir/readme.md`` names (see the module's notes); returns
    their path. Progress and the Python layers found go to ``stream`` (default: standard
    error; None: silent)."""
    stream = sys.stderr if stream == "stderr" else stream
    model_dir = os.fspath(model_dir)
    readme = os.path.join(model_dir, "readme.md")
    fields = read_front_matter(readme)
    say = (lambda text: print(text, file=stream)) if stream is not None else (lambda text: None)
    modules = python_modules(model_dir)
    for path, layer, module, cls in modules:
        say("%s: layer '%s' is a Python layer: building this net imports module '%s' (class "
            "'%s'); refuse it with --no_python_layers unless you trust it"
            % (path, layer, module, cls))
    if not modules:
        say("The nets in %s have no Python layers." % model_dir)
    target = os.path.join(model_dir, fields["caffemodel"])
    expected = fields["sha1"].lower()
    if os.path.exists(target) and sha1_of(target) == expected:
        say("Model already exists: %s" % target)
        return target
    part = target + ".part"
    failures = []
    for url in _urls(fields, mirrors):
        # a .part of an earlier run that does not check out is fetched once more, whole
        attempts = 2 if os.path.exists(part) else 1
        for attempt in range(attempts):
            say("Downloading %s" % url)
            error = _get(url, part, timeout, _Progress(stream, fields["caffemodel"]), say)
            if error is not None:  # the .part stays: the next URL resumes it
                failures.append("%s (%s)" % (url, _describe(error)))
                break
            got = sha1_of(part)
            if got == expected:
                os.replace(part, target)
                say("Downloaded %s (SHA-1 checked)" % target)
                return target
            _remove(part)
            if attempt + 1 == attempts:
                failures.append("%s (SHA-1 %s, but readme.md says %s)" % (url, got, expected))
            else:
                say("%s: SHA-1 %s is not %s: the earlier partial file was wrong; starting "
                    "again" % (url, got, expected))
    kept = os.path.getsize(part) if os.path.exists(part) else 0
    if not kept:
        _remove(part)
    raise CaffeError("could not download %s: %s%s" % (
        fields["caffemodel"], "; ".join(failures),
        "; the %d bytes received are kept in %s, which the next run resumes" % (kept, part)
        if kept else ""))


def _get(url, part, timeout, progress, say):
    """Fetch ``url`` into ``part``, resuming after a connection that broke off mid-file; the
    error that ended it, or None."""
    error = None
    for _ in range(1 + RESUME_ATTEMPTS):
        try:
            _fetch(url, part, timeout, progress)
            error = None
            break
        except (OSError, http.client.HTTPException) as exc:
            error = exc
            broke_off = isinstance(exc, (http.client.IncompleteRead, ConnectionError))
            if not broke_off or not os.path.exists(part):
                break
            say("\n%s: %s; resuming" % (url, _describe(exc)))
    progress.end()
    return error


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
