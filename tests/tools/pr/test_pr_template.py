"""pr/pr_template.py: the upstream commit message and the PR body from the real templates."""

from __future__ import annotations

import pytest

from tests.tools.pr.pr_templates import MEGATRON_BRIDGE, MEGATRON_LM, NEMO_RL
from tools.patchtool.model.series import parse_depends
from tools.patchtool.pr.pr_template import (
    Dependency,
    Identity,
    PrFacts,
    dependency_line,
    drop_carry_notes,
    fill_template,
    pick_template,
    split_trailers,
    strip_comments,
    upstream_message,
)

ADA = Identity("Ada Lovelace", "ada@example.org")
BOT = "mcore-rl-stack@users.noreply.github.com"
ISSUE = "https://github.com/NVIDIA-NeMo/RL/issues/1141"
SUMMARY = "Why: `train()` crashes after an offload.\n\nHow: a guard names the missing step."
FILES = (("nemo_rl/a.py", "changed"), ("tests/unit/test_a.py", "new"))
NODE = "tests/unit/test_a.py::test_guard"


def facts(**over: object) -> PrFacts:
    base: dict[str, object] = {
        "summary": SUMMARY,
        "files": FILES,
        "issues": (ISSUE,),
        "upstream_tests": (NODE,),
        "repo": "NVIDIA-NeMo/RL",
    }
    base.update(over)
    return PrFacts(**base)  # type: ignore[arg-type]


# --- the commit message ---------------------------------------------------------------------


def test_upstream_message_drops_our_trailers_and_signs_off_as_the_contributor() -> None:
    body = (
        "Why: it breaks.\n\nTested: two ranks.\n\n"
        "Can be dropped when upstream guards the import (not on main\n067f987df, 2026-11).\n\n"
        "Upstream-Status: pending\nBug: https://x/issues/1\nOrigin: mcore-rl-stack\n"
        "Test: tests/patches/t.py::t\nUpstream-Test: tests/unit/t.py::t\nDepends-On: Up/a.patch\n"
        "Co-authored-by: Grace Hopper <grace@example.org>\n"
        f"Signed-off-by: mcore-rl-stack <{BOT}>\n"
    )
    message = upstream_message("fix(x): guard", body, ADA, BOT)
    assert message == (
        "fix(x): guard\n\nWhy: it breaks.\n\nTested: two ranks.\n\n"
        "Co-authored-by: Grace Hopper <grace@example.org>\n"
        "Signed-off-by: Ada Lovelace <ada@example.org>\n"
    )


def test_upstream_message_without_trailers_and_an_existing_own_signoff() -> None:
    assert upstream_message("Fix", "Why.\n", ADA, BOT) == f"Fix\n\nWhy.\n\n{ADA.signoff}\n"
    signed = f"Why.\n\nSigned-off-by: Other <o@example.org>\n{ADA.signoff}\n"
    assert upstream_message("Fix", signed, ADA, BOT) == (
        f"Fix\n\nWhy.\n\nSigned-off-by: Other <o@example.org>\n{ADA.signoff}\n"
    )
    # A `Key: value` line inside prose is not a trailer block unless it ends the message.
    assert split_trailers("Fix: do it.\n\nMore text.\n") == ("Fix: do it.\n\nMore text.", [])


def test_carry_notes_are_ours() -> None:
    text = (
        "Why.\n\nDrop when upstream ends the hold in the split\npath.\n\nDropping X is safe here."
    )
    assert drop_carry_notes(text) == "Why.\n\nDropping X is safe here."
    assert drop_carry_notes("Can be dropped once upstream merges it.") == ""


def test_parse_depends() -> None:
    assert parse_depends("Megatron-LM/moe-x.patch") == ("Megatron-LM", "moe-x.patch")
    assert parse_depends("moe-x.patch") is None
    assert parse_depends("Megatron-LM/a/b.patch") is None


# --- finding the template ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "found"),
    [
        ([".github/pull_request_template.md", "README.md"], ".github/pull_request_template.md"),
        ([".github/PULL_REQUEST_TEMPLATE.md"], ".github/PULL_REQUEST_TEMPLATE.md"),
        (["docs/Pull_Request_Template.md", ".github/x.md"], "docs/Pull_Request_Template.md"),
        (
            ["PULL_REQUEST_TEMPLATE", ".github/PULL_REQUEST_TEMPLATE.md"],
            ".github/PULL_REQUEST_TEMPLATE.md",
        ),
        (["PULL_REQUEST_TEMPLATE", "docs/pull_request_template.md"], "PULL_REQUEST_TEMPLATE"),
        (
            [".github/PULL_REQUEST_TEMPLATE/b.md", ".github/PULL_REQUEST_TEMPLATE/a.md"],
            ".github/PULL_REQUEST_TEMPLATE/a.md",
        ),
        ([".github/workflows/pull_request_template.md", "src/pull_request_template.md"], ""),
    ],
)
def test_pick_template_as_github_does(paths: list[str], found: str) -> None:
    assert pick_template(paths) == found


# --- filling the three real templates -----------------------------------------------------------


def boxes(body: str) -> dict[str, bool]:
    """Checklist label -> ticked."""
    out = {}
    for line in body.splitlines():
        text = line.strip()
        if text.startswith(("- [ ] ", "- [x] ")):
            out[text[6:]] = text.startswith("- [x]")
    return out


def test_megatron_lm_template() -> None:
    body = fill_template(MEGATRON_LM, facts(repo="NVIDIA/Megatron-LM"))
    assert "<!--" not in body and "-->" not in body
    assert body.index("# What does this PR do?") < body.index(SUMMARY) < body.index(":warning:")
    assert f"- `{NODE}`" in body
    assert f"Linked issue: {ISSUE}\n" in body
    ticked = boxes(body)
    assert ticked["I have added relevant unit tests"] is True
    assert ticked["I, the PR author, have personally reviewed every line of this PR."] is False
    assert sum(ticked.values()) == 1 and len(ticked) == 6  # functional tests, typing, docs: no


def test_megatron_bridge_template() -> None:
    body = fill_template(MEGATRON_BRIDGE, facts(repo="NVIDIA-NeMo/Megatron-Bridge"))
    assert body.startswith(f"# What does this PR do ?\n\n{SUMMARY}\n")
    assert "Add a one line overview" not in body and "Add specific line by line" not in body
    assert "# Changelog\n\n- Changes `nemo_rl/a.py`\n- Adds `tests/unit/test_a.py`\n" in body
    assert f"- Related to {ISSUE}\n" in body and "# (issue)" not in body
    ticked = boxes(body)
    assert [label for label, on in ticked.items() if on] == [
        "Did you write any new necessary tests?"
    ]


def test_nemo_rl_template_closes_its_own_issue() -> None:
    body = fill_template(NEMO_RL, facts())
    assert body.startswith(f"# What does this PR do ?\n\n{SUMMARY}\n")
    issues = body.index("# Issues\nList issues that this PR closes")
    assert body.index(f"- Closes {ISSUE}") > issues
    ticked = boxes(body)
    assert ticked["Did you write any new necessary tests?"] is True
    # "... for how to write, build and test the docs": a link's words tick nothing.
    assert not any(on for label, on in ticked.items() if "documentation" in label)
    assert not any(on for label, on in ticked.items() if label.startswith("Did you run"))


def test_nothing_ticked_or_claimed_without_tests_or_issue() -> None:
    for template in (MEGATRON_LM, MEGATRON_BRIDGE, NEMO_RL):
        body = fill_template(
            template, facts(files=(("nemo_rl/a.py", "changed"),), issues=(), upstream_tests=())
        )
        assert not any(boxes(body).values())
        assert "**Tests**" not in body and "Closes" not in body
    # Bridge's placeholder stays a placeholder when there is no issue to put there.
    assert "- Related to # (issue)" in fill_template(MEGATRON_BRIDGE, facts(issues=()))


def test_signoff_box_is_ticked_where_a_template_has_one() -> None:
    template = "# What does this PR do?\n\n- [ ] My commits are signed off (DCO)\n- [ ] Docs\n"
    assert boxes(fill_template(template, facts())) == {
        "My commits are signed off (DCO)": True,
        "Docs": False,
    }
    assert not boxes(fill_template(template, facts(signed_off=False)))[
        "My commits are signed off (DCO)"
    ]


def test_comments_are_stripped_consistently() -> None:
    text = "a <!-- x -->\n<!--\nmulti\n-->\nb: <!-- e.g. 1 -->\n"
    assert strip_comments(text) == "a\nb:\n"


def test_test_files_the_nodes_do_not_name_are_listed() -> None:
    files = (*FILES, ("tests/unit/conftest.py", "changed"), ("tests/unit/old.py", "deleted"))
    body = fill_template(NEMO_RL, facts(files=files))
    assert f"- `{NODE}`\n- `tests/unit/conftest.py` (changed)\n" in body
    assert "old.py" not in body


# --- dependencies ---------------------------------------------------------------------------


def dep(status: str = "pending", same: bool = False, stacked: str = "") -> Dependency:
    return Dependency(
        "Megatron-LM" if not same else "Megatron-Bridge",
        "moe-x.patch",
        "moe: allow an expert bias",
        "NVIDIA/Megatron-LM" if not same else "NVIDIA-NeMo/Megatron-Bridge",
        status,
        same,
        stacked,
    )


def test_dependency_lines() -> None:
    pr = "https://github.com/NVIDIA/Megatron-LM/pull/9"
    assert dependency_line(dep()) == (
        'Needs "moe: allow an expert bias" in NVIDIA/Megatron-LM (PR not opened yet), which '
        "must land there first."
    )
    assert f"({pr}), which must land there first" in dependency_line(dep(f"submitted {pr}"))
    assert dependency_line(dep("accepted abc123")).endswith("(merged as abc123).")
    assert dependency_line(dep(same=True)) == (
        'Needs "moe: allow an expert bias" (PR not opened yet) merged first; this PR does not '
        "contain it."
    )
    stacked = dependency_line(dep(same=True, stacked="mcore-rl-stack/moe-x"))
    assert stacked.startswith('Stacked on "moe: allow an expert bias"')
    assert "`mcore-rl-stack/moe-x`" in stacked and "review the last commit only" in stacked
    body = fill_template(NEMO_RL, facts(dependencies=(dep(),)))
    assert "**Depends on**\n\n- Needs " in body
