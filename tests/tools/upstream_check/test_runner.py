"""upstream_check/runner.py: the emulated whitespace hooks (no formatter needed)."""

from __future__ import annotations

from tools.patchtool.upstream_check.runner import _end_of_file, _trailing_whitespace


def test_whitespace_hooks() -> None:
    assert [f[0] for f in _trailing_whitespace(b"ok\nbad \nalso\t\r\nfine\r\n")] == [2, 3]
    assert _end_of_file(b"x = 1\n") == [] and _end_of_file(b"") == []
    assert _end_of_file(b"x = 1")[0][1] == "no newline at end of file"
    assert _end_of_file(b"x = 1\n\n")[0][1] == "blank lines at end of file"
