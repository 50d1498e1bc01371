"""The README, CONTRIBUTING.md and docs/*.md say true things about the repository: every Python
block compiles with no undefined name (pyflakes), every relative link reaches a file (and a
heading, for a ``#fragment``), every repository path they mention exists, the README stays a
short front door, and its three snippets run as written."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
README_MAX_LINES = 150
# Paths that the documented commands write (a trained model, a converted database): named in
# the docs, never committed.
GENERATED = (".caffemodel", ".solverstate", ".onnx", "_lmdb", "_lmdb/", ".h5")
# First path components that make a mention a repository path (anything else, such as OpenCV's
# `samples/dnn/...`, belongs to another project).
REPO_TOP = {name for name in os.listdir(ROOT) if not name.startswith(".")} | {".ci"}

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def pages():
    found = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CONTRIBUTING.md")]
    found += sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))
    return found


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _rel(path):
    return os.path.relpath(path, ROOT)


def python_blocks(text):
    """[(first line number, source)] of the ```python blocks of a markdown text."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(2))
            for m in FENCE.finditer(text) if m.group(1) == "python"]


def undefined_names(source, filename):
    """pyflakes' complaints about a block, unused imports and variables aside (a snippet may
    import a name only to show it)."""
    from pyflakes import api, reporter as pyflakes_reporter

    class Collect(pyflakes_reporter.Reporter):
        def __init__(self):
            self.messages = []

        def unexpectedError(self, filename, msg):
            self.messages.append("%s: %s" % (filename, msg))

        def syntaxError(self, filename, msg, lineno, offset, text):
            self.messages.append("%s:%s: syntax error: %s" % (filename, lineno, msg))

        def flake(self, message):
            kind = type(message).__name__
            if kind not in ("UnusedImport", "UnusedVariable", "RedefinedWhileUnused"):
                self.messages.append(str(message))

    collect = Collect()
    api.check(source, filename, collect)
    return collect.messages


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    outside = FENCE.sub("", text)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", outside, re.M)}


def broken_links(path, text):
    """Relative links of a page whose file (or heading) does not exist."""
    wrong = []
    outside = FENCE.sub("", text)
    for m in LINK.finditer(outside):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part \
            else path
        if not os.path.exists(dest):
            wrong.append("%s: link to %s: no such file" % (_rel(path), target))
        elif fragment and dest.endswith(".md") and fragment not in anchors(_read(dest)):
            wrong.append("%s: link to %s: no such heading" % (_rel(path), target))
    return wrong


def _mentions(text):
    """Tokens of code spans and code blocks that name a path inside the repository."""
    chunks = [m.group(1) for m in CODE_SPAN.finditer(FENCE.sub("", text))]
    chunks += [m.group(2) for m in FENCE.finditer(text)]
    for chunk in chunks:
        for token in re.split(r"[\s\"'=(),\[\]]+", chunk):
            token = token.split("::")[0].rstrip(".,;:")
            first = token.split("/")[0]
            if "/" not in token or first not in REPO_TOP:
                continue
            if re.search(r"[<>*{}$]|\.\.\.", token) or token.endswith(GENERATED):
                continue  # a pattern (`layers/<family>/...`), or a file a command writes
            yield token


def missing_paths(path, text):
    return ["%s: mentions %s, which does not exist" % (_rel(path), token)
            for token in sorted(set(_mentions(text)))
            if not os.path.exists(os.path.join(ROOT, token))]


@pytest.mark.parametrize("page", pages(), ids=_rel)
def test_python_blocks_have_no_undefined_names(page):
    text = _read(page)
    wrong = []
    for line, source in python_blocks(text):
        wrong += undefined_names(source, "%s, block at line %d" % (_rel(page), line))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", pages(), ids=_rel)
def test_relative_links_and_paths_exist(page):
    text = _read(page)
    wrong = broken_links(page, text) + missing_paths(page, text)
    assert not wrong, "\n".join(wrong)


def test_the_checks_catch_what_they_look_for(tmp_path):
    # Guard against checks that pass everything: a page with each kind of fault.
    page = tmp_path / "page.md"
    text = textwrap.dedent("""\
        # Title

        [ok](page.md), [gone](nowhere.md), [bad heading](page.md#no-such-part),
        [good heading](#title), [web](https://example.org/x.md),
        `pycaffe_lite/net.py`, `pycaffe_lite/no_such_module.py`, `samples/dnn/x.prototxt`

        ```python
        import pycaffe_lite as caffe
        net = caffe.Net(proto, caffe.TEST)
        ```
        """)
    page.write_text(text)
    links = broken_links(str(page), text)
    assert len(links) == 2 and "nowhere.md" in links[0] and "no-such-part" in links[1]
    assert [t for t in _mentions(text)] == ["pycaffe_lite/net.py",
                                            "pycaffe_lite/no_such_module.py"]
    assert len(missing_paths(str(page), text)) == 1
    (line, source), = python_blocks(text)
    assert line == 8
    flakes = undefined_names(source, "page.md")
    assert len(flakes) == 1 and "undefined name 'proto'" in flakes[0]


def test_readme_is_a_front_door():
    text = _read(os.path.join(ROOT, "README.md"))
    assert len(text.splitlines()) <= README_MAX_LINES
    blocks = FENCE.findall(text)
    # The two set-up commands come first, each in its own block: the LeNet example, the tests.
    assert blocks[0] == ("bash", "pip install . && bash models/lenet/train_lenet.sh\n")
    assert blocks[1] == ("bash", 'pip install -e ".[test]" && python -m pytest -q\n')
    assert text.index("```bash") < text.index("\n## ")
    assert len(python_blocks(text)) == 3
    # Every feature bullet is one line-item linking into docs/.
    section = text.split("## What is there")[1].split("\n## ")[0]
    bullets = re.findall(r"^- (.*)$", section, re.M)
    assert bullets and all(re.match(r"\[[^\]]+\]\(docs/[\w-]+\.md\)", b) for b in bullets)


@pytest.mark.slow
def test_readme_snippets_run_as_written(tmp_path, lenet_dir, mnist_lmdbs):
    """The three snippets, in a copy of the LeNet example where the first command has run
    (its LMDBs; the trained weights come from the second snippet's 100 iterations, standing
    in for the 2,000 of the first command)."""
    lenet = tmp_path / "models" / "lenet"
    shutil.copytree(lenet_dir, lenet,
                    ignore=shutil.ignore_patterns("*_lmdb", "*.caffemodel", "*.solverstate"))
    for db in mnist_lmdbs:
        os.symlink(db, lenet / db.name)
    snippets = [source for _, source in python_blocks(_read(os.path.join(ROOT, "README.md")))]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")

    def run(source):
        out = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    trained = run(snippets[1])
    loss = float(re.search(r"loss after 100 iterations: (\S+)", trained).group(1))
    assert loss < 0.7  # from ln(10) = 2.3 at the start
    shutil.copy(tmp_path / "lenet_100.caffemodel", lenet / "lenet_iter_2000.caffemodel")
    classified = run(snippets[0])
    assert float(re.search(r"accuracy on 64 digits: (\S+)", classified).group(1)) > 0.7
    assert "(64, 20, 24, 24) (20, 1, 5, 5)" in classified
    run(snippets[2])


def command_line_flags():
    """{command: set of its flags} from the argparse parsers (the canonical ``--`` spelling of
    each flag; aliases and hidden spellings aside)."""
    import argparse

    from pycaffe_lite.cli import build_parser

    found = {}
    for name, sub in build_parser().command_parsers.items():
        flags = set()
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            spelled = [o for o in action.option_strings if o.startswith("--")]
            if spelled:
                flags.add(spelled[0])
        found[name] = flags
    return found


def documented_commands(text):
    """{command: set of the flags its section names} of docs/command-line.md's
    '### `command`' sections."""
    section = text.split("## Every command and its flags")[1]
    found = {}
    for m in re.finditer(r"^### `([\w-]+)`\n(.*?)(?=^### |\Z)", section, re.M | re.S):
        spans = CODE_SPAN.findall(m.group(2))
        found[m.group(1)] = {flag for span in spans
                             for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", span)}
    return found


def test_the_command_line_page_lists_every_command_with_its_flags():
    documented = documented_commands(_read(os.path.join(DOCS, "command-line.md")))
    actual = command_line_flags()
    assert sorted(documented) == sorted(actual)
    wrong = {name: {"undocumented": sorted(actual[name] - documented[name]),
                    "not a flag": sorted(documented[name] - actual[name])}
             for name in actual if documented[name] != actual[name]}
    assert not wrong, wrong
    # and the check sees a missing flag and a missing command
    page = ("## Every command and its flags\n\n### `train`\n\n- `--solver S`: x\n\n"
            "### `test`\n\n- `--model M`, `--nope`\n")
    assert documented_commands(page) == {"train": {"--solver"}, "test": {"--model", "--nope"}}
