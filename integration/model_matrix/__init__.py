"""The model matrix: every text architecture Megatron-Bridge maps, converted and checked on CPU.

`families` says which architectures are in it and how each is shrunk to a tiny random
checkpoint; `checks` runs, on one rank of a gloo group, the worker's import at a layout, the
export of a changed model and a GRPO step; `matrix` runs every row and writes
`docs/models.json`; `page` renders `docs/models.md` from it and checks both are current;
`verdict` is when a recorded row passes (the bar both read).
"""
