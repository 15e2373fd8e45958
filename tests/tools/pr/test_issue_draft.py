"""pr/issue_draft.py: feature or fix by the stated rule, the message cut into the parts an
issue asks for, and the draft with what chose it and what it leaves."""

from __future__ import annotations

import pytest

from tests.tools.pr.issue_templates import BRIDGE_FEATURE, MLM_BUG
from tools.patchtool.errors import PatchToolError
from tools.patchtool.pr.issue_draft import (
    FEATURE,
    FIX,
    answers,
    description,
    draft_text,
    issue_kind,
    message_parts,
)
from tools.patchtool.pr.issue_template import parse_template

MESSAGE = """\
`Mixer.__init__` raises when mamba-ssm is missing:

    ImportError: MambaSSM is not installed

so no Mamba layer builds on a CPU.

- `torch_ssm.py` (new): the scan in torch.

With mamba-ssm installed, nothing changes.

Tests in `tests/unit_tests/ssm/test_mamba_mixer.py`: the mixer runs without mamba-ssm.

Still needed on main at d98e8a64 (same ImportError).

Upstream-Status: pending
Upstream-Test: tests/unit_tests/ssm/test_mamba_mixer.py::test_runs
"""


@pytest.mark.parametrize(
    ("subject", "trailers", "kind", "rule"),
    [
        ("Run X on torch", ["feature"], FEATURE, "the patch says `Kind: feature`"),
        ("Support X", ["fix"], FIX, "the patch says `Kind: fix`"),
        ("feat(dtensor): split the step", [], FEATURE, "Conventional Commits type is `feat`"),
        ("fix(model): build X without TE", [], FIX, "Conventional Commits type is `fix`"),
        ("Run MambaMixer without mamba-ssm", [], FEATURE, "first word `Run` is a feature verb"),
        ("moe: allow an expert bias", [], FEATURE, "first word `allow` is a feature verb"),
        ("Keep the given attention mask", [], FIX, "first word `Keep` is a fix verb"),
        ("Cache rotated keys", [], FIX, "`Cache` is neither a feature nor a fix verb"),
        ("WrappedTorchNorm: persist_layer_norm", [], FIX, "a patch is a fix by default"),
    ],
)
def test_feature_or_fix_by_the_stated_rule(
    subject: str, trailers: list[str], kind: str, rule: str
) -> None:
    decided = issue_kind(subject, trailers)
    assert decided.kind == kind and rule in decided.rule


def test_a_kind_trailer_says_feature_or_fix_once() -> None:
    with pytest.raises(PatchToolError, match="want one `Kind: feature` or `Kind: fix`"):
        issue_kind("Fix X", ["enhancement"])
    with pytest.raises(PatchToolError):
        issue_kind("Fix X", ["fix", "feature"])


def test_message_cut_by_the_series_convention() -> None:
    parts = message_parts(MESSAGE)
    assert parts.problem.startswith("`Mixer.__init__` raises")
    assert parts.problem.endswith("so no Mamba layer builds on a CPU.")  # the sentence goes on
    assert parts.logs == "ImportError: MambaSSM is not installed"
    assert parts.change == (
        "- `torch_ssm.py` (new): the scan in torch.\n\nWith mamba-ssm installed, nothing changes."
    )
    assert parts.tested.startswith("Tests in `tests/unit_tests/ssm/")
    assert parts.where == ("main at d98e8a64",)


def test_where_is_read_from_a_carry_note_too() -> None:
    text = "X drops the mask.\n\nCan be dropped when upstream keeps it (on main at abcdef12).\n"
    parts = message_parts(text)
    assert parts.where == ("main at abcdef12",) and "dropped" not in parts.problem + parts.change


def test_feature_draft_on_megatron_bridge_form_counts_what_it_leaves() -> None:
    template = parse_template(".github/ISSUE_TEMPLATE/feature_request.yml", BRIDGE_FEATURE)
    kind = issue_kind("feat(ssm): run X on torch", [])
    tests = ["tests/unit_tests/ssm/test_mamba_mixer.py::test_runs"]
    by_role = answers(kind.kind, "feat(ssm): run X on torch", message_parts(MESSAGE), tests)
    text, left = draft_text(template, kind, by_role)
    assert left == [
        "Alternatives considered",
        "Affected area (required)",
        "Urgency / use case (required)",
    ]
    assert text.startswith(
        "<!-- Drafted from .github/ISSUE_TEMPLATE/feature_request.yml, a feature request because "
        "the subject's Conventional Commits type is `feat`. 3 field(s) left for you: "
    )
    assert "### Desired outcome\n\nrun X on torch.\n\n- `torch_ssm.py` (new)" in text
    assert "A pull request with this change links this issue." in text
    assert "### Extra context\n\nHow the change was tested:\n\nTests in" in text
    assert "pytest tests/unit_tests/ssm/test_mamba_mixer.py::test_runs\n" in text
    assert "Upstream-Status" not in text and "Still needed" not in text


def test_bug_draft_on_megatron_lm_and_a_plain_draft_without_template() -> None:
    template = parse_template(".github/ISSUE_TEMPLATE/bug_report.md", MLM_BUG)
    kind = issue_kind("Fix the mixer", [])
    by_role = answers(kind.kind, "Fix the mixer", message_parts(MESSAGE), [])
    text, left = draft_text(template, kind, by_role)
    assert left == ["Expected behavior", "Additional context"]
    assert "**Steps/Code to reproduce bug**\n\nTests in `tests/" in text
    plain, none_left = draft_text(None, kind, by_role)
    assert none_left == [] and plain.startswith(
        "<!-- A plain draft (the upstream has no bug report template), a bug report because "
    )
    assert "## Problem\n\n`Mixer.__init__`" in plain
    assert "## Environment\n\nBranch / commit: main at d98e8a64" in plain
    assert "## Logs\n\n```\nImportError: MambaSSM is not installed\n```" in plain
    assert description("fix(model): build X") == "build X" and description("Fix X") == "Fix X"
