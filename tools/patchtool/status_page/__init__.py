"""The patch status page (docs/patches.md + docs/patches.json): what we carry, for how long,
and where each fix stands upstream."""
