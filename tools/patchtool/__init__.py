"""The patch-series tooling of mcore-rl-stack (Python standard library and git only)."""
