"""pr/issue_template.py on the upstreams' real issue templates (tests/tools/pr/
issue_templates.py): fields and roles, the template a kind takes, the fill and what it leaves."""

from __future__ import annotations

from tests.tools.pr.issue_templates import (
    BRIDGE_BUG,
    BRIDGE_FEATURE,
    MLM_BUG,
    MLM_FEATURE,
    MLM_QUESTION,
)
from tools.patchtool.pr.issue_template import (
    FEATURE,
    FIX,
    fill,
    is_template_file,
    issue_title,
    parse_template,
    pick_template,
)

DIR = ".github/ISSUE_TEMPLATE"


def test_megatron_lm_markdown_sections_are_fields_with_roles() -> None:
    bug = parse_template(f"{DIR}/bug_report.md", MLM_BUG)
    assert (bug.name, bug.title, bug.form) == ("Bug report", "", False)
    assert [(f.label, f.role) for f in bug.fields] == [
        ("Describe the bug", "problem"),
        ("Steps/Code to reproduce bug", "repro"),
        ("Expected behavior", "expected"),
        ("Additional context", "context"),
    ]
    assert bug.fields[2].ask == "A clear and concise description of what you expected to happen."
    feature = parse_template(f"{DIR}/feature_request.md", MLM_FEATURE)
    assert [f.role for f in feature.fields] == ["problem", "solution", "alternatives", "context"]


def test_bridge_form_fields_skip_markdown_and_keep_required_and_options() -> None:
    bug = parse_template(f"{DIR}/bug_report.yml", BRIDGE_BUG)
    assert (bug.title, bug.form) == ("[bug] ", True)
    assert [(f.label, f.role, f.required) for f in bug.fields] == [
        ("Problem", "problem", True),
        ("Minimal repro", "repro", True),
        ("Expected behavior", "expected", True),
        ("Affected area", "", True),
        ("Regression?", "", True),
        ("Environment", "environment", False),
        ("Logs", "logs", False),
    ]
    assert bug.fields[3].options[:2] == ("area:model", "area:recipe")
    feature = parse_template(f"{DIR}/feature_request.yml", BRIDGE_FEATURE)
    assert [f.role for f in feature.fields] == [
        "problem",
        "solution",
        "alternatives",
        "",
        "",
        "context",
    ]


def test_a_kind_takes_its_template_and_only_that() -> None:
    templates = [
        parse_template(f"{DIR}/question.md", MLM_QUESTION),
        parse_template(f"{DIR}/feature_request.md", MLM_FEATURE),
        parse_template(f"{DIR}/bug_report.md", MLM_BUG),
    ]
    feature, fix = pick_template(templates, FEATURE), pick_template(templates, FIX)
    assert feature and feature.path.endswith("feature_request.md")
    assert fix and fix.path.endswith("bug_report.md")
    assert pick_template(templates[:1], FIX) is None  # a question is no bug report
    assert is_template_file(f"{DIR}/bug_report.yml") and not is_template_file(f"{DIR}/config.yml")
    assert not is_template_file(".github/PULL_REQUEST_TEMPLATE.md")


def test_markdown_fill_keeps_the_question_where_no_answer_and_counts_it() -> None:
    template = parse_template(f"{DIR}/bug_report.md", MLM_BUG)
    body, left = fill(template, {"problem": "It breaks.", "repro": "Run it."})
    assert left == ["Expected behavior", "Additional context"]
    assert body.startswith("**Describe the bug**\n\nIt breaks.\n\n**Steps/Code to reproduce bug**")
    assert "**Expected behavior**\n\nA clear and concise description of what you expected" in body
    assert "Tag @NVIDIA/mcore-oncall" not in body.split("**Steps")[0]  # replaced by the answer


def test_form_fill_writes_what_github_renders_and_leaves_choices_commented() -> None:
    template = parse_template(f"{DIR}/bug_report.yml", BRIDGE_BUG)
    answers = {"problem": "It breaks.", "logs": "Traceback ...", "environment": ""}
    body, left = fill(template, answers)
    assert left == [
        "Minimal repro (required)",
        "Expected behavior (required)",
        "Affected area (required)",
        "Regression? (required)",
        "Environment",
    ]
    assert body.startswith("### Problem\n\nIt breaks.\n\n### Minimal repro\n\n<!-- Provide")
    assert (
        "### Regression?\n\n<!-- Did this work in an earlier version, branch, or commit? " in body
    )
    assert "One of: Yes, No, Not sure. -->" in body
    assert body.endswith("### Logs\n\n```shell\nTraceback ...\n```\n")
    assert "Thanks for taking the time" not in body  # the form's own notes are not the issue


def test_title_takes_the_template_prefix() -> None:
    bug = parse_template(f"{DIR}/bug_report.yml", BRIDGE_BUG)
    question = parse_template(f"{DIR}/question.md", MLM_QUESTION)
    assert issue_title(bug, "build X without TE") == "[bug] build X without TE"
    assert issue_title(question, "why?") == "[QUESTION] why?"
    assert issue_title(None, "Fix X") == "Fix X"
