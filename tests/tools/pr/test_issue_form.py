"""pr/issue_form.py: the YAML subset of issue forms and front matter, read without a library."""

from __future__ import annotations

import pytest

from tests.tools.pr.issue_templates import BRIDGE_BUG, MLM_QUESTION
from tools.patchtool.errors import PatchToolError
from tools.patchtool.pr.issue_form import parse_yaml, scalar


def test_bridge_bug_form_reads_as_github_does() -> None:
    form = parse_yaml(BRIDGE_BUG, "bug_report.yml")
    assert isinstance(form, dict)
    assert form["title"] == "[bug] " and form["labels"] == ["bug", "needs-triage"]
    body = form["body"]
    assert isinstance(body, list) and [item["type"] for item in body] == [
        "markdown",
        "textarea",
        "textarea",
        "textarea",
        "dropdown",
        "dropdown",
        "textarea",
        "textarea",
    ]
    assert body[0]["attributes"]["value"].startswith("Thanks for taking the time")
    assert "\n\n**If you already have a proposed fix" in body[0]["attributes"]["value"]
    repro = body[2]
    assert repro["attributes"]["placeholder"] == "1. Run ...\n2. Use config ...\n3. Observe ...\n"
    assert repro["attributes"]["render"] == "shell" and repro["validations"]["required"] is True
    assert body[5]["attributes"]["options"] == ["Yes", "No", "Not sure"]


def test_front_matter_plain_scalar_continued_on_the_next_line() -> None:
    header = MLM_QUESTION.split("---\n")[1]
    parsed = parse_yaml(header, "question.md")
    assert isinstance(parsed, dict)
    assert parsed["about"] == (
        "Ask a question about Megatron-LM that is not a bug, regression or enhancement request"
    )
    assert parsed["title"] == "[QUESTION]" and parsed["labels"] == ""


def test_scalars_flow_lists_and_comments() -> None:
    assert scalar("[bug, 'needs triage', \"a, b\"]  # labels") == ["bug", "needs triage", "a, b"]
    assert scalar("'it''s'") == "it's" and scalar('"say \\"hi\\""') == 'say "hi"'
    assert scalar("true") is True and scalar("") is None and scalar("a #b") == "a"
    assert scalar("issue#12") == "issue#12"  # a `#` inside a word is no comment
    text = "# header\nname: x\nbody:\n- type: input\n  attributes:\n    label: L\n"
    assert parse_yaml(text, "f.yml") == {
        "name": "x",
        "body": [{"type": "input", "attributes": {"label": "L"}}],
    }


def test_what_it_cannot_read_raises_with_file_and_line() -> None:
    with pytest.raises(PatchToolError, match=r"f\.yml:2: want `key: value`"):
        parse_yaml("name: x\njust words\n", "f.yml")
    with pytest.raises(PatchToolError, match=r"f\.yml:3: unexpected indentation"):
        parse_yaml("a:\n    b: 1\n  c: 2\n", "f.yml")
