"""prs/lines.py: changed lines of a diff, their move onto the pin, and the verdicts."""

from __future__ import annotations

from tools.patchtool.prs.lines import (
    Change,
    likeness,
    onto_pin,
    parse_diff,
    parse_moves,
    shift,
    verdict,
)

DIFF = """\
--- a/f.py
+++ b/f.py
@@ -3,0 +4,2 @@
+new a
+new b
@@ -10,2 +12 @@
-old 10
-old 11
+new 10
"""


def test_parse_diff_positions() -> None:
    (first, second) = parse_diff(DIFF.splitlines())["f.py"]
    assert (first.start, first.end, first.added) == (4, 4, ["new a", "new b"])
    assert (second.start, second.end, second.removed) == (10, 12, ["old 10", "old 11"])


def test_shift_and_rewritten_lines() -> None:
    moves = parse_moves(DIFF.splitlines())["f.py"]
    assert moves == [(4, 4, 2), (10, 12, 1)]
    assert shift(2, moves) == 2 and shift(5, moves) == 7 and shift(20, moves) == 21
    kept = onto_pin([Change(6, 7, ["x"], ["y"]), Change(11, 12, ["old 11"], [])], moves)
    assert [(c.start, c.end) for c in kept] == [(8, 9)]  # line 11 was rewritten: left out


def test_same_fix_written_differently() -> None:
    ours = {
        "m.py": [
            Change(
                5,
                6,
                ["size = kv * heads"],
                ["size = v_channels * heads", "k_channels = k_channels or kv"],
            )
        ]
    }
    theirs = {
        "m.py": [
            Change(
                5,
                6,
                ["size = kv * heads"],
                [
                    "k_channels = kv if k_channels is None else k_channels",
                    "value_size = v_channels * heads",
                    "size = value_size",
                ],
            )
        ]
    }
    like = likeness(ours, theirs)
    assert like.removes_ours and like.names == 1.0 and like.lines < 0.5
    assert verdict(ours, theirs)[0] == "same-fix"
    other = {"m.py": [Change(5, 6, ["size = kv * heads"], ["size = 2"])]}
    assert verdict(ours, other)[0] == "conflicts"
    assert verdict(ours, {"m.py": [Change(12, 13, ["a"], ["b"])]})[0] == "nearby"
    assert verdict(ours, {"m.py": [Change(40, 41, ["a"], ["b"])]})[0] == ""
    assert verdict(ours, {"tests/test_m.py": [Change(5, 6, ["a"], ["b"])]})[0] == ""
