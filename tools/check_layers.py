#!/usr/bin/env python3
"""The layout bar of tools/patchtool and integration/mcore_grpo, checked from the real code.

    python3 tools/check_layers.py            # check; one line per breach, exit 1 if any
    python3 tools/check_layers.py --json     # the figures and breaches, machine-readable
    python3 tools/check_layers.py --write-diagram   # regenerate docs/layers.md

Why: a layer that imports the one above it, or a module or function nobody can hold in their
head, is how one concern ends up with two homes. The bar, in tools/patchtool and
integration/mcore_grpo: modules <= 450 lines, functions (methods and nested ones too) <= 60
lines, except in a module that is a carried patch's file kept byte for byte (PATCH_COPIES: its
functions are split in the patch); in tools/patchtool each folder (and each top-level module) is
in one layer of the table below, a module in its folder's, and imports point down the table (in
the domain layer only inside the same folder); in integration each top-level package is in one
layer of INTEGRATION_LAYERS (entry, driver, engine, worker, config) and imports point down, and
no modules import one another in a circle (every import counts,
also one inside a function: a lazy import hides a cycle, it does not break it). The check also
fails when docs/layers.md is not what `--write-diagram` would write.
Standard library only (tools/ runs before any environment exists).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCHTOOL = ROOT / "tools" / "patchtool"
INTEGRATION = ROOT / "integration" / "mcore_grpo"
DIAGRAM = ROOT / "docs" / "layers.md"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60

# tools/patchtool, top to bottom: (layer, its folders and top-level modules). A module is in
# its folder's layer (`rebase.engine`: `rebase`); a module at the top in its own (`cli`).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("commands", ("commands", "cli", "command", "outcomes")),
    (
        "domain",
        ("apply", "lint", "pr", "prs", "rebase", "status_page", "upstream_check", "verify"),
    ),
    ("source", ("source",)),
    ("model", ("model",)),
    ("git", ("git", "errors", "interrupts", "command_lock")),
]
# The layer whose folders (apply, pr, rebase, verify, ...) do not import one another: each is
# one concern the commands combine.
SEPARATE = "domain"
# integration/mcore_grpo, top to bottom: (layer, top-level packages and modules). Imports point
# down or stay inside a layer: the entry point uses everything; the NeMo-RL
# driver drives the engine's pieces; the engine (`grpo`) drives the worker; the worker knows
# only the config it is given.
INTEGRATION_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry", ("cli",)),
    ("driver", ("nemo_rl_driver",)),
    ("engine", ("grpo",)),
    ("worker", ("worker",)),
    ("config", ("config", "presets", "run_output")),
]
# integration's top-level packages beside mcore_grpo: test and docs support that imports the
# product and is never imported by it (the pytest plugins `tools/patches verify` loads into the
# upstreams' own suites; the model matrix that measures every architecture and writes
# docs/models.md). The same size bar holds for them.
SUPPORT_PACKAGES = ("upstream_pytest", "model_matrix")
# integration/mcore_grpo modules that are the file a carried patch adds, kept byte for byte
# (tests/patches/nemo_rl/test_nccl_offload_copy_in_sync.py): module -> the patch. Their long
# functions are listed, not breaches: splitting one means editing, re-exporting and
# re-measuring the patch, not this copy alone.
PATCH_COPIES = {
    "worker/memory/nccl_offload.py": "patches/NeMo-RL/megatron-nccl-offload.patch",
}


@dataclass
class Report:
    """Figures and breaches of one run."""

    breaches: list[str] = field(default_factory=list)
    modules: dict[str, int] = field(default_factory=dict)
    long_functions: list[str] = field(default_factory=list)
    edges: Counter[tuple[str, str]] = field(default_factory=Counter)


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(name: str) -> tuple[int, str]:
    """(rank from the top, layer) of a tools/patchtool module: its folder's; ValueError if the
    folder (or, at the top, the module) is in no layer."""
    for rank, (layer, folders) in enumerate(LAYERS):
        if folder_of(name) in folders:
            return rank, layer
    raise ValueError(name)


def folder_of(name: str) -> str:
    """The folder of tools/patchtool a module is in (`rebase`, `verify`, ...); a module at the
    top is its own (`cli`)."""
    return name.split(".")[0]


def imported(tree: ast.Module, name: str, is_package: bool, top: str) -> list[tuple[str, int]]:
    """Modules of the same top-level package `top` that `tree` imports (also inside
    functions): (dotted name relative to `top`, line)."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith(top + "."):
                target = node.module[len(top) + 1 :]
            else:
                continue
            for alias in node.names:
                out.append((f"{target}.{alias.name}" if target else alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            out += [
                (a.name[len(top) + 1 :], node.lineno)
                for a in node.names
                if a.name.startswith(top + ".")
            ]
    return out


def resolve(target: str, known: set[str]) -> str | None:
    """The module `target` names (`pkg.mod.Name` -> `pkg.mod`), if it is one of ours."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def sizes(path: Path, rel: str, report: Report, functions: bool) -> ast.Module:
    text = path.read_text()
    lines = len(text.splitlines())
    report.modules[rel] = lines
    if lines > MAX_MODULE_LINES:
        report.breaches.append(
            f"{rel}: {lines} lines (max {MAX_MODULE_LINES}); split it by concern"
        )
    tree = ast.parse(text, str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                line = (
                    f"{rel}:{node.lineno}: {node.name} is {length} lines (max {MAX_FUNCTION_LINES})"
                )
                report.long_functions.append(line)
                if functions:
                    report.breaches.append(line + "; split it")
    return tree


def check_patchtool(report: Report) -> None:
    files = {module_name(p, PATCHTOOL): p for p in sorted(PATCHTOOL.rglob("*.py"))}
    known = set(files)
    for name, path in files.items():
        rel = str(path.relative_to(ROOT))
        tree = sizes(path, rel, report, functions=True)
        if path.name == "__init__.py":  # docstrings only (checked: no imports below)
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
                report.breaches.append(f"{rel}: a package __init__ that imports; keep it empty")
            continue
        try:
            rank, layer = layer_of(name)
        except ValueError:
            report.breaches.append(
                f"{rel}: no layer; add its folder to LAYERS in tools/check_layers.py"
            )
            continue
        deps = {
            (resolve(t, known), line) for t, line in imported(tree, name, False, "tools.patchtool")
        }
        for dep, line in sorted((d, n) for d, n in deps if d and d != name and _placed(d)):
            dep_rank, dep_layer = layer_of(dep)
            report.edges[(_node(name), _node(dep))] += 1
            sideways = layer == SEPARATE and folder_of(dep) != folder_of(name)
            if dep_rank < rank or (dep_rank == rank and sideways):
                report.breaches.append(
                    f"{rel}:{line}: {layer} module imports {dep} ({dep_layer}); imports point "
                    "down the layers (tools/check_layers.py LAYERS)"
                )


def check_integration(report: Report) -> None:
    files = {module_name(p, INTEGRATION): p for p in sorted(INTEGRATION.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, patch in PATCH_COPIES.items():
        if not (INTEGRATION / module).is_file() or not (ROOT / patch).is_file():
            report.breaches.append(
                f"tools/check_layers.py: PATCH_COPIES names {module} -> {patch}, which is not "
                "there any more; remove the entry"
            )
    for name, path in files.items():
        rel = str(path.relative_to(ROOT))
        copy = path.relative_to(INTEGRATION).as_posix() in PATCH_COPIES
        tree = sizes(path, rel, report, functions=not copy)
        targets = imported(tree, name, path.name == "__init__.py", "mcore_grpo")
        graph[name] = {}
        for target, line in targets:
            dep = resolve(target, set(files))
            if dep is not None and dep != name:
                graph[name].setdefault(dep, line)
        _check_integration_layers(report, name, rel, targets)
        report.breaches += [
            f"{rel}:{line}: the product imports {module} (test or docs support, "
            f"{SUPPORT_PACKAGES}); "
            "move what both need into mcore_grpo"
            for module, line in _support_imports(tree)
        ]
    for top in SUPPORT_PACKAGES:
        for path in sorted((INTEGRATION.parent / top).rglob("*.py")):
            sizes(path, str(path.relative_to(ROOT)), report, functions=True)
    for cycle in import_cycles(graph):
        path = " -> ".join(f"{a}:{graph[a][b]}" for a, b in itertools.pairwise(cycle))
        report.breaches.append(
            f"{INTEGRATION.relative_to(ROOT)}: import cycle {path} -> {cycle[-1]} (module:line "
            "of each import); move what both need to the module it belongs to"
        )


def _support_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(module, line) of every import of a SUPPORT_PACKAGES module in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return [(m, line) for m, line in found if m.split(".")[0] in SUPPORT_PACKAGES]


def integration_layer(module: str) -> int | None:
    """The index in INTEGRATION_LAYERS of `module` (a name under mcore_grpo), by its top-level
    package; None where no layer holds it."""
    top = module.split(".")[0]
    for index, (_, members) in enumerate(INTEGRATION_LAYERS):
        if top in members:
            return index
    return None


def _check_integration_layers(
    report: Report, name: str, rel: str, targets: list[tuple[str, int]]
) -> None:
    """Breaches of INTEGRATION_LAYERS by `name`'s imports (an import of a layer above it)."""
    own = integration_layer(name) if name else None
    if own is None:
        if name:  # the package's own __init__ is in no layer
            report.breaches.append(
                f"{rel}: mcore_grpo.{name.split('.')[0]} is in no layer; add it to "
                "INTEGRATION_LAYERS in tools/check_layers.py"
            )
        return
    for target, line in targets:
        layer = integration_layer(target)
        if layer is not None and layer < own:
            report.breaches.append(
                f"{rel}:{line}: {INTEGRATION_LAYERS[own][0]} module mcore_grpo.{name} imports "
                f"mcore_grpo.{target} ({INTEGRATION_LAYERS[layer][0]}, a layer above it); pass "
                "it in as an argument or move what both need down"
            )


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected component of two or more modules of `graph` (module
    -> imported modules): the shortest path from its first module back to it."""
    found = []
    for component in _components(graph):
        start = min(component)
        paths = {start: [start]}
        queue = [start]
        while queue:  # breadth first inside the component: the shortest way round
            here = queue.pop(0)
            for there in sorted(graph[here]):
                if there == start:
                    found.append([*paths[here], start])
                    queue = []
                    break
                if there in component and there not in paths:
                    paths[there] = [*paths[here], there]
                    queue.append(there)
    return sorted(found)


def _components(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """Tarjan's strongly connected components of two or more nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = set(stack[stack.index(node) :])
            del stack[stack.index(node) :]
            if len(component) > 1:
                out.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def _node(name: str) -> str:
    """Diagram node of a module: its layer and folder."""
    _, layer = layer_of(name)
    return f"{layer}:{folder_of(name)}"


def diagram(report: Report) -> str:
    """docs/layers.md: the layer table and a Mermaid graph of the real imports."""
    out = [
        "# Layers of tools/patchtool (generated)",
        "",
        "Generated from the imports by `python3 tools/check_layers.py --write-diagram`; CI checks",
        "it is current (`.ci/run` step 4, pre-commit hook `layers`). Each folder of tools/patchtool",
        "(and each module at its top) is in one layer, and a module is in its folder's. Imports",
        "point down: commands -> domain -> source -> model -> git; in the domain layer only inside",
        "one folder. An arrow is `importer --> imported`, labelled with the number of import",
        "statements.",
        "",
        "integration/mcore_grpo (not drawn), top to bottom: "
        + " -> ".join(f"{layer} ({', '.join(members)})" for layer, members in INTEGRATION_LAYERS)
        + "; imports point down or stay inside a layer, and no modules import one another in a",
        "circle, counting imports inside functions. Beside it, test and docs support that imports",
        f"it and is never imported by it: {', '.join(f'integration/{t}' for t in SUPPORT_PACKAGES)}.",
        "",
        "| layer | folders | modules |",
        "|---|---|---|",
    ]
    names = sorted(
        module_name(p, PATCHTOOL) for p in PATCHTOOL.rglob("*.py") if p.stem != "__init__"
    )
    placed = [n for n in names if _placed(n)]
    for layer, folders in LAYERS:
        where = [f"`{f}/`" if (PATCHTOOL / f).is_dir() else f"`{f}.py`" for f in folders]
        members = [n for n in placed if layer_of(n)[1] == layer]
        out.append(f"| {layer} | {', '.join(where)} | {', '.join(f'`{m}`' for m in members)} |")
    out += ["", "```mermaid", "flowchart TD"]
    nodes = sorted({n for edge in report.edges for n in edge}, key=lambda n: (_rank(n), n))
    for layer, _ in LAYERS:
        out.append(f"  subgraph {layer}")
        for node in (n for n in nodes if n.split(":")[0] == layer):
            out.append(f'    {_id(node)}["{node.split(":")[1]}"]')
        out.append("  end")
    for (a, b), count in sorted(report.edges.items(), key=lambda e: (_rank(e[0][0]), e[0])):
        if a != b:
            out.append(f"  {_id(a)} -->|{count}| {_id(b)}")
    out += ["```", ""]
    return "\n".join(out)


def _placed(name: str) -> bool:
    try:
        layer_of(name)
    except ValueError:  # a breach of its own (check_patchtool)
        return False
    return True


def _rank(node: str) -> int:
    return [layer for layer, _ in LAYERS].index(node.split(":")[0])


def _id(node: str) -> str:
    return node.replace(":", "_").replace(".", "_")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="figures and breaches as JSON")
    parser.add_argument(
        "--write-diagram", action="store_true", help=f"regenerate {DIAGRAM.relative_to(ROOT)}"
    )
    args = parser.parse_args(argv)
    report = Report()
    check_patchtool(report)
    check_integration(report)
    text = diagram(report)
    if args.write_diagram:
        DIAGRAM.write_text(text)
    elif not DIAGRAM.is_file() or DIAGRAM.read_text() != text:
        report.breaches.append(
            f"{DIAGRAM.relative_to(ROOT)} is not current; run python3 tools/check_layers.py --write-diagram"
        )
    if args.json:
        big = {m: n for m, n in report.modules.items() if n > MAX_MODULE_LINES}
        print(
            json.dumps(
                {
                    "ok": not report.breaches,
                    "breaches": report.breaches,
                    "modules_over_limit": big,
                    "long_functions": report.long_functions,
                },
                indent=2,
            )
        )
    else:
        for line in report.breaches:
            print(f"error: {line}", file=sys.stderr)
    return 1 if report.breaches else 0


if __name__ == "__main__":
    sys.exit(main())
