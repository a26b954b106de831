"""The strict loader: plain data, every node located, nothing unsafe gets through."""

from __future__ import annotations

import pytest

from ratchet_runner.errors import SpecError
from ratchet_runner.spec.loader import MAX_BYTES, MAX_DEPTH, load_text


def code_of(text: str | bytes) -> tuple[str, int, int]:
    with pytest.raises(SpecError) as caught:
        load_text(text, "t.yaml")
    first = caught.value.diagnostics[0]
    return first.code, first.line, first.column


def test_plain_scalars_follow_yaml_1_2_not_1_1() -> None:
    doc = load_text("a: on\nb: yes\nc: 2026-12-20\nd: true\ne: ~\nf: 012\ng: 1.5\nh: '7'\n")
    assert doc.data == {
        "a": "on",
        "b": "yes",
        "c": "2026-12-20",
        "d": True,
        "e": None,
        "f": 12,
        "g": 1.5,
        "h": "7",
    }


def test_every_value_and_key_is_located_by_json_pointer() -> None:
    doc = load_text("top:\n  rows:\n    - {state: a, event: go}\n    - {state: b, evnt: go}\n")
    assert doc.marks["/top/rows/1"] == (4, 7)
    assert doc.marks["/top/rows/1/state"] == (4, 15)
    assert doc.key_marks["/top/rows/1/evnt"] == (4, 18)
    assert doc.locate("/top/rows/1/missing") == (4, 7)


def test_pointer_parts_with_slash_and_tilde_are_escaped() -> None:
    doc = load_text("'a/b': {'c~d': 1}\n")
    assert doc.marks["/a~1b/c~0d"] == (1, 16)


def test_duplicate_keys_are_rejected_at_the_second_key() -> None:
    assert code_of("a: 1\nb:\n  c: 1\n  c: 2\n") == ("E106", 4, 3)


def test_anchors_and_aliases_are_rejected() -> None:
    assert code_of("a: &x 1\n")[0] == "E105"
    assert code_of("a: [1]\nb: *x\n")[0] in ("E105", "E104")


def test_a_billion_laughs_bomb_is_rejected_before_expansion() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    assert code_of(bomb)[0] == "E105"


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system ['true']\n",
        "a: !!python/name:os.system\n",
        "a: !custom 1\n",
        "a: !!str 1\n",
    ],
)
def test_every_explicit_tag_is_rejected(text: str) -> None:
    assert code_of(text)[0] == "E107"


def test_nesting_deeper_than_the_cap_is_rejected_without_recursion() -> None:
    assert code_of("a: " + "[" * 10_000 + "]" * 10_000)[0] == "E103"
    ok = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert load_text(ok).data["a"] is not None


def test_text_that_is_not_utf8_is_rejected_with_its_position() -> None:
    assert code_of(b"name: ok\nb: caf\xe9\n") == ("E101", 2, 7)


def test_files_over_the_size_cap_are_rejected() -> None:
    assert code_of(b"a: " + b"x" * MAX_BYTES)[0] == "E102"


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    assert load_text("\ufeffa: 1\n".encode()).data == {"a": 1}


def test_a_five_thousand_digit_number_is_rejected_not_parsed() -> None:
    assert code_of("a: " + "9" * 5000 + "\n") == ("E111", 1, 4)
    assert load_text("a: '" + "9" * 5000 + "'\n").data["a"] == "9" * 5000


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "E108"),
        ("# nothing\n", "E108"),
        ("- a\n", "E110"),
        ("just text\n", "E110"),
        ("a: 1\n---\nb: 2\n", "E109"),
        ("? [a]\n: 1\n", "E112"),
        ("a: 'open\n", "E104"),
        ("a: {b: 1\n", "E104"),
    ],
)
def test_malformed_documents_get_their_own_code(text: str, code: str) -> None:
    assert code_of(text)[0] == code


def test_tabs_get_a_hint_about_spaces() -> None:
    with pytest.raises(SpecError) as caught:
        load_text("a:\n\t- b\n")
    assert "spaces, not tabs" in caught.value.diagnostics[0].message
