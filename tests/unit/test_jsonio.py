"""server/jsonio.loads: every way client JSON can be unusable is one BadJson naming why."""

import pytest

from llama_omni_py.server.jsonio import MAX_DEPTH, BadJson, loads


@pytest.mark.parametrize(
    "data, why",
    [
        (b"\xff{}", "not UTF-8"),
        ("  ", "empty"),
        ("{", "not JSON"),
        ('{"t": NaN}', "NaN is not a JSON value"),
        ('{"t": -Infinity}', "-Infinity is not a JSON value"),
        ('{"t": 1e400}', "out of range"),
        ("[" * 100_000 + "]" * 100_000, "nests deeper"),
        ('{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "nests deeper"),
        ("[1]", "must be a JSON object"),
        ('"text"', "must be a JSON object"),
    ],
)
def test_unusable_json_is_one_bad_json(data, why):
    with pytest.raises(BadJson, match=why):
        loads(data)


def test_usable_json_passes_unchanged():
    deep = '{"a": ' * (MAX_DEPTH - 1) + "1" + "}" * (MAX_DEPTH - 1)
    assert loads(deep)["a"]["a"]
    assert loads(b'{"x": 1.5, "y": [1, "z", null, true]}') == {"x": 1.5, "y": [1, "z", None, True]}
    assert loads("[1, 2]", expect=list) == [1, 2]
