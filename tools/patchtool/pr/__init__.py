"""A patch's own upstream PR: `open-pr` (the branch, the body from the upstream's PR template,
the linked issue from its issue templates) and `set-status` (patch_status.py), which records
where the PR stands. Other people's PRs on our lines are prs/."""
