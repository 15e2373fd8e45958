"""pr/pr_title.py: the upstream's title convention, read from its own files; notes only."""

from __future__ import annotations

from tools.patchtool.pr.pr_title import (
    CONVENTIONAL,
    CONVENTIONAL_TYPES,
    SENTENCE,
    listed,
    title_convention,
    title_notes,
)

# The shape of Megatron-Bridge's CONTRIBUTING.md "Commit and PR Title Format" (2026-08).
BRIDGE = """## Commit and PR Title Format

We follow [Conventional Commits 1.0.0](https://www.conventionalcommits.org/en/v1.0.0/).

The scope is optional. Use the imperative mood, lowercase first letter, and no trailing period.

**Types**:
- `feat` - New feature
- `fix` - Bug fix

**Scopes** (optional, pick the most relevant one):
- `model` - Model implementations and HF bridge logic
- `peft` - PEFT methods (LoRA, adapters) and adapter export

**Breaking Changes**: append `!`
"""
MEGATRON = '- Write the commit message subject line in the imperative mood ("Change X").\n'


def test_bridge_contributing_lists_types_and_scopes() -> None:
    assert listed(BRIDGE, "Types") == ("feat", "fix")
    assert listed(BRIDGE, "Scopes") == ("model", "peft")
    conv = title_convention({"CONTRIBUTING.md": BRIDGE}, [])
    assert (conv.kind, conv.source, conv.lowercase) == (CONVENTIONAL, "CONTRIBUTING.md", True)
    assert title_notes("fix(peft): import Transformer Engine lazily", conv) == []
    notes = title_notes("fix(ernie): Build the spec.", conv)
    assert len(notes) == 2
    assert "scope ernie is not one of model, peft (CONTRIBUTING.md)" in notes[0]
    assert "lowercase first letter and no trailing period" in notes[1]
    assert "type 'perf' is not one of feat, fix" in title_notes("perf(model): faster", conv)[0]
    multi = title_notes("fix(gemma2, model): x", conv)
    assert len(multi) == 1 and "scope gemma2 is not one of" in multi[0]


def test_semantic_pr_workflow_means_conventional_with_any_scope() -> None:
    conv = title_convention(
        {"CONTRIBUTING.md": "Sign off your commits.\n"}, ["semantic-pull-request.yml", "build.yml"]
    )
    assert (conv.kind, conv.source, conv.types) == (
        CONVENTIONAL,
        "semantic-pull-request.yml",
        CONVENTIONAL_TYPES,
    )
    assert title_notes("feat(dtensor): split train step (begin/finish)", conv) == []
    notes = title_notes("Split the train step", conv)
    assert notes and "not `type(scope): description`" in notes[0]
    assert "the subject is used as is" in notes[0]


def test_megatron_sentence_in_the_imperative_mood() -> None:
    conv = title_convention(
        {"CONTRIBUTING.md": "Visit our page.\n", "docs/developer/contribute.md": MEGATRON}, []
    )
    assert (conv.kind, conv.source, conv.imperative) == (
        SENTENCE,
        "docs/developer/contribute.md",
        True,
    )
    assert title_notes("Cache rotated keys in static-batching inference", conv) == []
    assert title_notes("moe: allow an expert bias with the softmax router", conv) == []
    assert "imperative verb, not 'cached'" in title_notes("Cached rotated keys", conv)[0]
    assert "no trailing period" in title_notes("Cache rotated keys.", conv)[0]
    assert title_convention({}, []).source == "no stated convention"
