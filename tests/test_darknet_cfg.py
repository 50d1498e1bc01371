"""The Darknet .cfg reader: Darknet's syntax, line numbers in errors and warnings."""

import pytest

from pycaffe_lite.darknet import DarknetError, DarknetWarning, parse_cfg, read_cfg

CFG = """\
# a comment
; another comment
[net]
width = 416
height=416
 channels=3\t

[convolutional]
batch_normalize=1
filters = 16
size=3
anchors = 10,14,  23,27
activation=leaky

[conv]
filters=4

[max]
size=2
"""


def test_sections_options_and_lines():
    cfg = parse_cfg(CFG, "m.cfg")
    assert cfg.net.name == "net" and cfg.net.line == 3 and cfg.net.index == -1
    assert [s.name for s in cfg.layers] == ["convolutional", "convolutional", "maxpool"]
    assert [s.header for s in cfg.layers] == ["convolutional", "conv", "max"]
    assert [s.index for s in cfg.layers] == [0, 1, 2]
    assert [s.line for s in cfg.layers] == [8, 15, 18]
    conv = cfg.layers[0]
    # Darknet removes every whitespace character of a line
    assert conv.options["anchors"].value == "10,14,23,27"
    assert conv.options["filters"].line == 10
    assert cfg.net.get_int("channels") == 3
    assert conv.get_floats("anchors") == [10, 14, 23, 27]
    assert conv.get_int("stride", 1) == 1
    assert conv.where("size") == "m.cfg:11"
    assert [o.key for o in conv.unread()] == ["batch_normalize", "filters", "size", "activation"]


def test_network_alias_and_read_file(tmp_path):
    path = tmp_path / "x.cfg"
    path.write_text("[network]\nwidth=1\n\n[avg]\n")
    cfg = read_cfg(str(path))
    assert cfg.net.name == "net" and cfg.layers[0].name == "avgpool"
    assert cfg.name == "x"


@pytest.mark.parametrize("text,pattern", [
    ("", r"<string>:1: no sections"),
    ("[convolutional]\nfilters=1\n", r"<string>:1: the first section is \[convolutional\]"),
    ("width=3\n[net]\n", r"<string>:1: option 'width=3' comes before the first section"),
    ("[net]\nwidth\n", r"<string>:2: cannot read 'width': expected key=value"),
    ("[net]\n=3\n", r"<string>:2: cannot read '=3'"),
    ("[net]\n[net\n", r"<string>:2: malformed section header"),
    ("[net]\n\n[conv]\n\n[network]\n", r"<string>:5: a second \[network\] section"),
])
def test_syntax_errors_name_the_line(text, pattern):
    with pytest.raises(DarknetError, match=pattern):
        parse_cfg(text)


def test_missing_file():
    with pytest.raises(DarknetError, match=r"nope.cfg: file not found"):
        read_cfg("nope.cfg")


def test_numbers_as_darknet_reads_them():
    cfg = parse_cfg("[net]\na=3\nb=-2.5e-1\nc=.5\nd=12abc\ne=abc\nf=1,2,\ng=1,x\n")
    net = cfg.net
    assert net.get_int("a") == 3
    assert net.get_float("b") == -0.25
    assert net.get_float("c") == 0.5
    with pytest.warns(DarknetWarning, match=r"<string>:5: \[net\]: d=12abc: the text after 12 "
                                            r"is ignored"):
        assert net.get_int("d") == 12
    with pytest.raises(DarknetError, match=r"<string>:6: \[net\]: e=abc: expected an integer"):
        net.get_int("e")
    with pytest.warns(DarknetWarning, match=r"<string>:7: \[net\]: f ends with a comma"):
        assert net.get_ints("f") == [1, 2]
    with pytest.raises(DarknetError, match=r"<string>:8: \[net\]: g=1,x: entry 'x' is not an "
                                           r"integer"):
        net.get_ints("g")
    with pytest.raises(DarknetError, match=r"<string>:1: \[net\]: missing is required"):
        net.get_int("missing")


def test_duplicate_key_warns_and_first_wins():
    with pytest.warns(DarknetWarning, match=r"<string>:3: \[net\]: width is given again \(first "
                                            r"at line 2\)"):
        cfg = parse_cfg("[net]\nwidth=3\nwidth=4\n")
    assert cfg.net.get_int("width") == 3


def test_windows_line_endings():
    cfg = parse_cfg("[net]\r\nwidth=3\r\n\r\n[maxpool]\r\nsize=2\r\n")
    assert cfg.net.get_int("width") == 3 and cfg.layers[0].get_int("size") == 2
