"""Run the model matrix: every row's checks in one spawned 2-rank gloo group, results as JSON.

    uv run python -m model_matrix.matrix                  # all rows -> docs/models.{json,md}
    uv run python -m model_matrix.matrix --arch GemmaForCausalLM   # re-measure some rows
    uv run python -m model_matrix.matrix --check          # the page is current (CI)

Per architecture: megatron logits vs `transformers`' at TP=1, TP=2 and, for MoE, EP=2; the
export of a changed model (at TP=2, or EP=2 for MoE: the sharded layout is the one that can go
wrong); one GRPO step at the same layout; shared-prefix rows against whole rows at TP=1 and
TP=2 (dense) or EP=2 (MoE). A failing check records its one-line reason and the next check
runs. All rows share one process group (each process pays megatron's and Bridge's imports
once).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_matrix.verdict import TOLERANCE, passes

REPO_ROOT = Path(__file__).resolve().parents[2]
JSON_PATH = REPO_ROOT / "docs" / "models.json"
MARKDOWN_PATH = REPO_ROOT / "docs" / "models.md"
WORLD = 2
# A rank whose check fails alone leaves the other in a collective until this ends it.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)


@dataclass(frozen=True)
class Outcome:
    """One check's result: a value, or the one-line reason it could not run."""

    value: Any = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error} if self.error else {"value": self.value}


def one_line(err: BaseException) -> str:
    """`Type: first line of the message (where)`: where is the innermost upstream frame of the
    exception this one came from (a `generator raised StopIteration` says nothing itself)."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    root = err
    while (inner := root.__cause__ or root.__context__) is not None:
        root = inner
    where = ""
    frames = traceback.extract_tb(root.__traceback__)
    for frame in reversed(frames):
        for marker in ("/megatron/", "/transformers/", "/mcore_grpo/", "/model_matrix/"):
            if marker in frame.filename:
                where = f"{marker.strip('/')}/{frame.filename.split(marker, 1)[1]}:{frame.lineno}"
                break
        if where:
            break
    if any(f.filename.endswith("unittest/mock.py") for f in frames):
        where += ", in a unittest.mock stand-in for a missing module"
    text = f"{type(err).__name__}: {message}"[:240]
    return f"{text} ({where})" if where else text


def _agree(outcome: Outcome, combine: Callable[[list[Any]], Any]) -> Outcome:
    """Every rank's outcome of one check as one: the first error, else the values combined."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, outcome)
    errors = [o.error for o in gathered if o.error]
    return Outcome(error=errors[0]) if errors else Outcome(combine([o.value for o in gathered]))


def _check(fn: Callable[[], Any], combine: Callable[[list[Any]], Any]) -> Outcome:
    """`fn` on every rank, its outcome agreed. The process environment is restored after:
    megatron-core sets Transformer Engine's attention-backend variables (NVTE_*) from a
    model's config, and the next row's model would be refused for them."""
    environ = dict(os.environ)
    try:
        outcome = Outcome(fn())
    except Exception as err:  # a check's failure is the matrix's data, not the run's end
        outcome = Outcome(error=one_line(err))
        # Said at once: a rank that fails alone leaves the others waiting in a collective.
        print(f"[models] rank {_rank()}: {outcome.error}", file=sys.stderr, flush=True)
    finally:
        os.environ.clear()
        os.environ.update(environ)
        _release_groups()
    return _agree(outcome, combine)


def _release_groups() -> None:
    """Destroy every process group but the world. megatron-core's `destroy_model_parallel`
    drops its references only; torch keeps each gloo group and its threads alive, and a
    process that builds hundreds of models ran 4,000 gloo threads per rank and slowed down
    tenfold."""
    import torch.distributed as dist

    world = dist.GroupMember.WORLD
    for group in list(dist.distributed_c10d._world.pg_map):
        if group is not world:
            dist.destroy_process_group(group)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _first(values: list[Any]) -> Any:
    return values[0]


def run_row(arch: str, workdir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Every check of `arch` on this rank (all ranks call it together)."""
    import torch.distributed as dist

    from model_matrix import checks, families

    started = time.monotonic()
    checkpoint, exported = workdir / arch, workdir / f"{arch}-exported"
    written = Outcome()
    if dist.get_rank() == 0:
        try:
            written = Outcome(families.write_checkpoint(checkpoint, arch))
        except Exception as err:
            written = Outcome(error=one_line(err))
    written = _agree(written, _first)
    row: dict[str, Any] = {"architecture": arch, "in_matrix": True}
    if written.error:
        row["checkpoint"] = written.to_json()
        return row
    row["features"] = written.value
    vocab = families.TINY_SIZES["vocab_size"]
    moe = "MoE" in written.value
    layouts = [("TP=1", 1, 1), ("TP=2", 2, 1)] + ([("EP=2", 1, 2)] if moe else [])
    row["layouts"] = {}
    for name, tp, ep in layouts:
        outcome = _check(
            lambda tp=tp, ep=ep: checks.logits_difference(checkpoint, tp, ep, vocab), max
        )
        row["layouts"][name] = outcome.to_json()
        log(f"{arch} {name}: {_show(outcome)}")
        if name == "TP=1" and outcome.error:
            # It does not build: every other check would fail on the same line (or on what the
            # failed build left behind), so the row carries this one reason.
            row["seconds"] = round(time.monotonic() - started, 1)
            return row
    name, tp, ep = layouts[-1]
    export = _check(lambda: checks.export_difference(checkpoint, exported, tp, ep, vocab), max)
    row["export"] = {"layout": name, **export.to_json()}
    log(f"{arch} export at {name}: {_show(export)}")
    step = _check(lambda: checks.grpo_step(checkpoint, tp, ep, vocab), _step_of_ranks)
    row["grpo_step"] = {"layout": name, **step.to_json()}
    log(f"{arch} GRPO step at {name}: {step.value if not step.error else step.error}")
    row["shared_prefix"] = {}
    # MoE at TP=1 and EP=2: its TP=2 needs sequence parallelism (docs/shared-prefix.md).
    for name, tp, ep in [layout for layout in layouts if not (moe and layout[0] == "TP=2")]:
        shared = _check(
            lambda tp=tp, ep=ep: checks.shared_prefix_difference(checkpoint, tp, ep, vocab, moe),
            _worst,
        )
        row["shared_prefix"][name] = shared.to_json()
        log(f"{arch} shared prefix at {name}: {shared.value if not shared.error else shared.error}")
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def _worst(values: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' shared-prefix figures: the largest of each (a refusal is the same on all)."""
    if "off" in values[0]:
        return values[0]
    return {key: max(v[key] for v in values) for key in values[0]}


def _step_of_ranks(values: list[dict[str, float]]) -> dict[str, float]:
    return {
        "loss": values[0]["loss"],
        "max_weight_change": max(v["max_weight_change"] for v in values),
    }


def _show(outcome: Outcome) -> str:
    return outcome.error or f"max |diff| = {outcome.value:.2e}"


def regressions(baseline: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    """Rows that pass every column in `baseline` and not in `doc`, each with what it shows now."""
    now = {row["architecture"]: row for row in doc["rows"]}
    lost = []
    for row in baseline["rows"]:
        arch = row["architecture"]
        if passes(row) and not passes(now.get(arch, {})):
            errors = [
                v["error"] for v in now.get(arch, {}).get("layouts", {}).values() if "error" in v
            ]
            lost.append(f"{arch}: {errors[0] if errors else 'a column over tolerance or missing'}")
    return lost


def _rank_main(rank: int, port: int, archs: list[str], out_path: str) -> None:
    """One rank: the group, then every row; rank 0 appends each row to `out_path` (JSON lines)."""
    import faulthandler
    import signal

    import torch.distributed as dist

    # `kill -USR1 <pid>` prints where a rank is (a hung collective names itself).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD)
    )
    # NVTE_* pick Transformer Engine's attention backend; megatron-core sets them from the
    # config of a model built in the calling process (a test before, a notebook) and refuses a
    # model whose attention_backend disagrees. The matrix runs without TE: start from none.
    for key in [k for k in os.environ if k.startswith("NVTE_")]:
        del os.environ[key]
    # megatron-core compiles some fused activations (GPT-OSS's) with torch.compile; two ranks
    # writing one inductor cache read each other's half-written objects ("file too short").
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(
        prefix=f"mcore-models-inductor-{rank}-"
    )
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=COLLECTIVE_TIMEOUT)

    def log(line: str) -> None:
        if rank == 0:
            print(f"[models] {line}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="mcore-models-") as tmp:
        shared = [tmp]
        dist.broadcast_object_list(shared, src=0)  # one directory, rank 0's
        for i, arch in enumerate(archs, 1):
            log(f"[{i}/{len(archs)}] {arch}")
            row = run_row(arch, Path(shared[0]), log)
            dist.barrier()
            if rank == 0:  # row by row: a group that dies keeps the rows it finished
                with open(out_path, "a") as out:
                    out.write(json.dumps(row) + "\n")
    dist.destroy_process_group()


def measure(archs: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of `archs`, measured in spawned groups of `WORLD` gloo ranks: one group for
    all, and where a rank process dies (a crash, the kernel's OOM killer), that row records
    it and a new group goes on with the next."""
    import socket

    import torch.multiprocessing as mp

    rows: list[dict[str, Any]] = []
    remaining = list(archs)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.jsonl"
        while remaining:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            died = ""
            try:
                mp.start_processes(  # type: ignore[no-untyped-call]
                    _rank_main, args=(port, remaining, str(out)), nprocs=WORLD, start_method="spawn"
                )
            except Exception as err:  # the group's death is this row's result
                died = f"a rank process died: {str(err).strip().splitlines()[0]}"
            done = (
                [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
            )
            out.unlink(missing_ok=True)
            rows += done
            remaining = remaining[len(done) :]
            if remaining and not died:
                died = "the rank processes ended before this row"
            if remaining:
                print(f"[models] {remaining[0]}: {died}", file=sys.stderr, flush=True)
                rows.append(
                    {"architecture": remaining[0], "in_matrix": True, "checkpoint": {"error": died}}
                )
                remaining = remaining[1:]
    return rows


def versions() -> dict[str, str]:
    """What the figures were measured with: the libraries and the pinned upstreams."""
    import subprocess

    import torch
    import transformers

    found = {"torch": torch.__version__, "transformers": transformers.__version__}
    for upstream in ("Megatron-Bridge", "Megatron-LM"):
        tree = subprocess.run(
            ["git", "ls-tree", "HEAD", f"3rdparty/{upstream}"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if len(tree) >= 3:
            found[upstream] = tree[2][:10] + " + patches/" + upstream
    return found


def document(measured: list[dict[str, Any]], previous: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON of every Bridge architecture: `measured` rows replace `previous` ones."""
    from mcore_grpo.worker.bridge_source import import_auto_bridge

    from model_matrix import families

    today = datetime.date.today().isoformat()
    current = families.rows(import_auto_bridge().list_supported_models())
    fresh = {r["architecture"]: {**r, "measured": today} for r in measured}
    kept = {r["architecture"]: r for r in (previous or {}).get("rows", []) if r["in_matrix"]}
    out_rows: list[dict[str, Any]] = []
    for row in current:
        if not row.in_matrix:
            out_rows.append(
                {
                    "architecture": row.architecture,
                    "in_matrix": False,
                    "reason": row.reason,
                    "bridge": row.bridge,
                }
            )
            continue
        found = fresh.get(row.architecture) or kept.get(row.architecture)
        out_rows.append(
            {
                **(found or {"architecture": row.architecture, "in_matrix": True}),
                "bridge": row.bridge,
            }
        )
    everything = all(r["architecture"] in fresh for r in out_rows if r["in_matrix"])
    return {
        "tolerance": TOLERANCE,
        "fully_measured": today if everything else (previous or {}).get("fully_measured", "never"),
        "versions": versions() if everything or previous is None else previous["versions"],
        "rows": out_rows,
    }


def check(json_path: Path, markdown_path: Path) -> list[str]:
    """Why the page is not current (empty when it is)."""
    from mcore_grpo.worker.bridge_source import import_auto_bridge

    from model_matrix import families, page

    if not json_path.is_file():
        return [f"{json_path} is missing: run `uv run python -m model_matrix.matrix`"]
    doc = json.loads(json_path.read_text())
    problems = page.stale_rows(doc, families.rows(import_auto_bridge().list_supported_models()))
    if not markdown_path.is_file() or markdown_path.read_text() != page.render(doc):
        problems.append(f"{markdown_path} is not the rendering of {json_path}")
    return problems


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments (the nightly workflow's invocation is checked against them)."""
    parser = argparse.ArgumentParser(
        prog="python -m model_matrix.matrix", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--arch",
        action="append",
        default=[],
        help="measure only this architecture (repeatable); other rows are kept",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=JSON_PATH,
        help=f"the measurement (default {JSON_PATH.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        default=MARKDOWN_PATH,
        help=f"the page (default {MARKDOWN_PATH.relative_to(REPO_ROOT)})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check the page is current; exit 1 naming what is stale",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="after measuring, exit 1 naming every row that passes in this JSON and no longer "
        "does (the nightly full run against the committed docs/models.json)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mcore_grpo.worker.bridge_source import import_auto_bridge

    from model_matrix import families, page

    if args.check:
        problems = check(args.json, args.markdown)
        for line in problems:
            print(f"models: {line}", file=sys.stderr)
        if problems:
            print(
                "models: re-run `uv run python -m model_matrix.matrix` (or --arch for the rows named)",
                file=sys.stderr,
            )
        return 1 if problems else 0
    in_matrix = [
        r.architecture
        for r in families.rows(import_auto_bridge().list_supported_models())
        if r.in_matrix
    ]
    unknown = [a for a in args.arch if a not in in_matrix]
    if unknown:
        print(
            f"models: {', '.join(unknown)} is not in the matrix; it has: {', '.join(in_matrix)}",
            file=sys.stderr,
        )
        return 2
    previous = json.loads(args.json.read_text()) if args.json.is_file() else None
    rows = measure(args.arch or in_matrix)
    doc = document(rows, previous)
    args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    args.markdown.write_text(page.render(doc))
    ok = sum(passes(r) for r in doc["rows"])
    print(
        f"models: {ok} of {len(in_matrix)} pass every column; wrote {args.json} and {args.markdown}",
        file=sys.stderr,
    )
    if args.baseline is not None:
        lost = regressions(json.loads(args.baseline.read_text()), doc)
        for line in lost:
            print(f"models: regression: {line}", file=sys.stderr)
        return 1 if lost else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
