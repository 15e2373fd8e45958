"""The series on an upstream's feeder branch (manifest `feeder`, e.g. Megatron-LM's `dev`): how
each patch applies there and, where it conflicts, which upstream commits moved its lines."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..model.manifest import Upstream
from .bases import history_repos
from .conflict_cause import Cause, conflict_causes, repo_with
from .result import CONFLICT, PatchResult


@dataclass(frozen=True)
class FeederResult:
    """One replay of a series on the feeder branch at `commit`."""

    commit: str
    patches: dict[str, PatchResult]
    causes: dict[str, list[Cause]]

    @classmethod
    def of(
        cls,
        root: Path,
        up: Upstream,
        patches: list[PatchResult],
        commit: str,
        repos: list[Path] | None = None,
    ) -> FeederResult:
        """Classifications from the rebase engine; causes from the first of `repos` (the
        replay's scratch repository), then `up`'s histories, holding both the pin and `commit`
        (none found when no such history is at hand: said on stderr)."""
        conflicts = [p for p in patches if p.classification == CONFLICT]
        histories = [*(repos or []), *history_repos(root, up)]
        repo = repo_with(histories, up.commit, commit) if conflicts else None
        if conflicts and repo is None:
            print(
                f"report: {up.name}: no history holds both the pin and {up.feeder} "
                f"({commit[:12]}); conflicts are listed without the commits that caused them",
                file=sys.stderr,
            )
        causes = {
            p.name: conflict_causes(
                repo,
                up.commit,
                commit,
                (root / up.series_dir / p.name).read_text(encoding="utf-8"),
                p.conflict_files or None,
            )
            for p in conflicts
            if repo is not None
        }
        return cls(commit, {p.name: p for p in patches}, causes)
