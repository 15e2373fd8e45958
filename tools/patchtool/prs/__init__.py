"""Upstream pull requests against the series: which PRs touch a patch's lines, in what state,
and whether they make the same fix (`tools/patches prs`, `open-pr`, the status page)."""
