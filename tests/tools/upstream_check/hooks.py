"""Hook files and specs shared by the upstream_check tests."""

RUFF_SPEC, BLACK_SPEC = "ruff==0.9.9", "black==24.4.2"
SIGNOFF = "Signed-off-by: Test Dev <dev@example.invalid>\n"
CONTRIBUTING = "Sign your work: git commit -s adds `Signed-off-by: Name <email>`.\n"
RUFF_HOOKS = """repos:
  - repo: https://github.com/astral-sh/ruff-pre-commit
    rev: "v0.9.9" # pinned
    hooks:
    - id: ruff
      args: ["--fix"]
"""
BLACK_HOOKS = """repos:
- repo: https://github.com/psf/black
  rev: 'refs/tags/24.4.2:refs/tags/24.4.2'
  hooks:
  - id: black
    files: ^megatron/core/.*
    args: ["--skip-magic-trailing-comma", "--skip-string-normalization"]
"""
