"""mam.util.quote.shown: the one way a message quotes a value it did not choose, in each of its manners."""

from __future__ import annotations

import pytest

from mam.util.quote import shown


@pytest.mark.parametrize("value", ["a\nb", "\x1b[31mred", "tab\t", "\r", "\u2028"])
@pytest.mark.parametrize("quote", ["reprlib", "repr", "plain"])
def test_no_quoted_value_can_break_the_line_or_hide_a_control(value: str, quote: str) -> None:
    text = shown(value, quote=quote)  # type: ignore[arg-type]
    assert text.isprintable() and text.startswith("'")


def test_masked_writes_each_unprintable_character_as_a_question_mark_unquoted() -> None:
    assert shown("ssh: \x1b[2Jboom\n", quote="masked") == "ssh: ?[2Jboom?"


def test_the_default_bounds_any_value_and_cuts_what_it_wrote_with_the_mark_last() -> None:
    assert shown("ok") == "'ok'"
    assert shown(["x"] * 1000) == "['x', 'x', 'x', 'x', ...]"  # a list is bounded part by part
    cut = shown({"k": "v" * 10_000}, 40)
    assert len(cut) == 40 and cut.endswith("...")


def test_repr_cuts_the_value_and_marks_it_after_the_quotes() -> None:
    assert shown("abcdef", 3, quote="repr", cut="value") == "'abc'..."
    assert shown("abc", 3, quote="repr", cut="value") == "'abc'"


def test_inside_marks_the_cut_within_the_quotes() -> None:
    assert shown("abcdef", 3, quote="repr", cut="inside") == "'abc...'"


def test_plain_leaves_a_printable_whole_word_bare_and_quotes_a_cut_or_unprintable_one() -> None:
    assert shown("claude", quote="plain", cut="unmarked") == "claude"
    assert shown("cl\naude", quote="plain", cut="unmarked") == "'cl\\naude'"
    assert shown("x" * 100, 5, quote="plain", cut="unmarked") == "'xxxxx'"  # quoted: it is not the whole word


@pytest.mark.parametrize("limit", [5, 40, 80, 200])
def test_a_huge_value_stays_bounded_in_every_manner(limit: int) -> None:
    huge = "\n" * 100_000
    for quote in ("reprlib", "repr", "plain", "masked"):
        for cut in ("text", "value", "inside", "unmarked"):
            # the cut is made on the value (or the text) before quoting: a quoted newline is two characters
            assert len(shown(huge, limit, quote=quote, cut=cut)) <= 2 * limit + 5
