"""The GRPO driver: the step loop, what a run leaves behind (metrics, checkpoints), and the
dry run of a parallel layout."""
