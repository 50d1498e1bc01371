"""``pycaffe-lite download_model`` against HTTP servers on 127.0.0.1 written here: one with
Range support, one that drops the connection mid-file, one that ignores Range, 404s and a port
nobody listens on. The expected SHA-1 is computed here with hashlib."""

import hashlib
import http.server
import io
import os
import socket
import threading

import pytest

from pycaffe_lite import cli
from pycaffe_lite.download import RESUME_ATTEMPTS, download_model
from pycaffe_lite.errors import CaffeError

CONTENT = bytes(range(256)) * 1200 + b"tail"  # 307,204 bytes: several reads of 64 KiB
SHA1 = hashlib.sha1(CONTENT).hexdigest()
NAME = "tiny.caffemodel"

PYTHON_NET = '''name: "withpy"
input: "x" input_shape { dim: 1 dim: 2 }
layer { name: "custom" type: "Python" bottom: "x" top: "y"
        python_param { module: "zoo_layers" layer: "Custom" } }
'''


class Handler(http.server.BaseHTTPRequestHandler):
    """/ok/<name>: Range support; /drop/<name>: a whole-file request gets half the bytes and
    the connection closes; /cut/<name>: every request gets 1000 bytes and the connection
    closes; /norange/<name>: Range ignored; anything else: 404."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Range")))
        kind = self.path.split("/")[1]
        if kind not in ("ok", "drop", "norange", "cut") or not self.path.endswith(NAME):
            self.send_error(404, "Not Found")
            return
        wanted = self.headers.get("Range")
        start = 0
        if wanted and kind != "norange":
            start = int(wanted.split("=")[1].split("-")[0])
        body = CONTENT[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d"
                             % (start, len(CONTENT) - 1, len(CONTENT)))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if kind == "cut":  # every answer stops 1000 bytes in: this server never finishes
            self.wfile.write(body[:1000])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if kind == "drop" and not start:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    httpd.url = "http://127.0.0.1:%d" % httpd.server_address[1]
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def dead_url():
    """A loopback URL on a port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return "http://127.0.0.1:%d/%s" % (port, NAME)


def model_dir(folder, url, sha1=SHA1):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "readme.md").write_text("---\nname: Tiny\ncaffemodel: %s\ncaffemodel_url: %s\n"
                                      "license: unrestricted\nsha1: %s\n---\n\nA tiny model.\n"
                                      % (NAME, url, sha1))
    (folder / "deploy.prototxt").write_text(PYTHON_NET)
    (folder / "solver.prototxt").write_text('net: "deploy.prototxt" base_lr: 0.1')
    return folder


def left_files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(NAME))


def test_download_checks_and_lists_python_modules(server, tmp_path):
    folder = model_dir(tmp_path / "m", server.url + "/ok/" + NAME)
    out = io.StringIO()
    path = download_model(folder, stream=out)
    assert open(path, "rb").read() == CONTENT
    assert left_files(folder) == [NAME]
    text = out.getvalue()
    assert "'custom'" in text and "module 'zoo_layers'" in text and "100%" in text
    assert server.requests == [("/ok/" + NAME, None)]
    # a second run finds the file whole and asks for nothing
    assert "already exists" in (lambda o: (download_model(folder, stream=o), o.getvalue()))(
        io.StringIO())[1]
    assert len(server.requests) == 1


def test_resumes_when_the_server_drops_mid_file(server, tmp_path):
    folder = model_dir(tmp_path / "m", server.url + "/drop/" + NAME)
    download_model(folder, stream=None)
    assert (folder / NAME).read_bytes() == CONTENT
    half = (len(CONTENT)) // 2
    assert server.requests == [("/drop/" + NAME, None), ("/drop/" + NAME, "bytes=%d-" % half)]


def test_resumes_a_partial_file_and_restarts_where_range_is_ignored(server, tmp_path):
    folder = model_dir(tmp_path / "m", server.url + "/ok/" + NAME)
    (folder / (NAME + ".part")).write_bytes(CONTENT[:1000])
    download_model(folder, stream=None)
    assert (folder / NAME).read_bytes() == CONTENT
    assert server.requests == [("/ok/" + NAME, "bytes=1000-")]
    other = model_dir(tmp_path / "n", server.url + "/norange/" + NAME)
    (other / (NAME + ".part")).write_bytes(b"x" * 1000)  # not even the right bytes
    download_model(other, stream=None)
    assert (other / NAME).read_bytes() == CONTENT and left_files(other) == [NAME]


def test_a_wrong_partial_file_is_fetched_again_whole(server, tmp_path):
    folder = model_dir(tmp_path / "m", server.url + "/ok/" + NAME)
    (folder / (NAME + ".part")).write_bytes(b"x" * 1000)  # resumed, it cannot check out
    download_model(folder, stream=None)
    assert (folder / NAME).read_bytes() == CONTENT and left_files(folder) == [NAME]
    assert server.requests == [("/ok/" + NAME, "bytes=1000-"), ("/ok/" + NAME, None)]


@pytest.mark.parametrize("case", ["wrong_sha1", "http_404", "dead_host"])
def test_failures_exit_non_zero_naming_the_url_and_leave_nothing(case, server, tmp_path,
                                                                 capsys):
    url = {"wrong_sha1": server.url + "/ok/" + NAME, "http_404": server.url + "/gone/" + NAME,
           "dead_host": dead_url()}[case]
    sha1 = "0" * 40 if case == "wrong_sha1" else SHA1
    folder = model_dir(tmp_path / "m", url, sha1)
    assert cli.main(["download_model", str(folder), "--timeout", "20"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("pycaffe-lite download_model: error: ") and url in err
    assert {"wrong_sha1": SHA1, "http_404": "HTTP 404", "dead_host": "cannot reach"}[case] in err
    assert left_files(folder) == []


def test_mirrors_are_tried_in_order(server, tmp_path, capsys):
    folder = model_dir(tmp_path / "m", server.url + "/gone/" + NAME)
    dead = dead_url()
    assert cli.main(["download_model", str(folder), "--mirror", dead, "--mirror",
                     server.url + "/ok/", "--mirror", server.url + "/norange/" + NAME]) == 0
    assert (folder / NAME).read_bytes() == CONTENT
    assert [p for p, _ in server.requests] == ["/gone/" + NAME, "/ok/" + NAME]
    err = capsys.readouterr().err
    assert err.index("/gone/") < err.index(dead) < err.index("/ok/")


def test_bad_readme_is_a_clear_error(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "readme.md").write_text("---\nname: x\ncaffemodel: a.caffemodel\n---\n")
    with pytest.raises(CaffeError, match="readme.md: the front matter lacks caffemodel_url, "
                                         "sha1"):
        download_model(folder, stream=None)
    with pytest.raises(CaffeError, match="readme.md"):
        download_model(tmp_path / "nowhere", stream=None)
    assert os.listdir(folder) == ["readme.md"]


def test_the_part_of_an_interrupted_run_is_resumed_on_the_mirror(server, tmp_path):
    """Ctrl-C left 1000 bytes in the .part; the first URL is dead now: the mirror resumes."""
    folder = model_dir(tmp_path / "m", server.url + "/gone/" + NAME)
    (folder / (NAME + ".part")).write_bytes(CONTENT[:1000])
    assert cli.main(["download_model", str(folder), "--mirror", dead_url(),
                     "--mirror", server.url + "/ok/"]) == 0
    assert (folder / NAME).read_bytes() == CONTENT and left_files(folder) == [NAME]
    assert server.requests == [("/gone/" + NAME, "bytes=1000-"), ("/ok/" + NAME, "bytes=1000-")]


def test_bytes_from_a_server_that_fails_are_resumed_on_the_next_and_kept_at_the_end(
        server, tmp_path, capsys):
    folder = model_dir(tmp_path / "m", server.url + "/cut/" + NAME)
    # the first server gives 1000 bytes a request, then fails for good; the mirror resumes
    assert cli.main(["download_model", str(folder), "--mirror", server.url + "/ok/"]) == 0
    assert (folder / NAME).read_bytes() == CONTENT
    got = 1000 * (1 + RESUME_ATTEMPTS)
    assert server.requests[-1] == ("/ok/" + NAME, "bytes=%d-" % got)
    # no URL finishes: the bytes received stay, named in the error, and the next run resumes
    other = model_dir(tmp_path / "n", server.url + "/cut/" + NAME)
    del server.requests[:]
    assert cli.main(["download_model", str(other), "--mirror", server.url + "/gone/"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert ("the %d bytes received are kept in %s" % (got, other / (NAME + ".part"))) in err
    assert (other / (NAME + ".part")).read_bytes() == CONTENT[:got]
    assert server.requests[-1] == ("/gone/" + NAME, "bytes=%d-" % got)
    assert cli.main(["download_model", str(other), "--mirror", server.url + "/ok/"]) == 0
    assert (other / NAME).read_bytes() == CONTENT and left_files(other) == [NAME]
    assert server.requests[-1] == ("/ok/" + NAME, "bytes=%d-" % (2 * got))
