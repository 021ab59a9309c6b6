"""Reduce one ASTRA-sim run of our Chakra export to the two files kept here.

Usage, from the repository's root (``RUN``: the directory ASTRA-sim ran in, holding ``log/`` and
its stdout saved as ``out.txt``; ``EXPORT``: the export's path prefix, e.g. ``run/dante``)::

    python3 tests/cases/astra-sim/reduce_run.py [--ranks-only] RUN EXPORT NAME [OUT]

writes ``NAME-ranks.csv`` and (without ``--ranks-only``, for the runs kept for their node counts
only) ``NAME-calls.csv`` into ``OUT`` (default: ``tests/cases/astra-sim/``):

* ``NAME-ranks.csv``: per rank, the nodes with an ``issue`` line and with a ``callback`` line in
  ``log/log*.log`` (ASTRA-sim's ``trace-enabled`` workload log), how many of the latter are
  communication nodes (Chakra node types 5, 6, 7: send, receive, collective), and the ``sys[r]
  finished, T cycles, exposed communication E cycles`` of stdout (1 cycle = 1 ns);
* ``NAME-calls.csv``: per collective node of rank 0 (type 7), by ``call_id``, over the nodes of every rank that
  carry the same ``call_id`` attribute in our export: how many ranks, the first and the last
  ``issue`` tick and the last ``callback`` tick.

Not part of the package or the tests: it only makes the fixtures the tests read.
"""
from __future__ import annotations

import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.export.test_chakra import attrs, decode  # noqa: E402

LINE = re.compile(r"\] (issue|callback),sys->id=(\d+), tick=(\d+), node->id=(\d+), "
                  r"node->name=.*, node->type=(\d+)$")
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
COMM_TYPES = {5, 6, 7}


def main(run: Path, export: Path, name: str, ranks_only: bool, out: Path | None = None) -> None:
    issued: dict[int, set] = defaultdict(set)
    done: dict[int, set] = defaultdict(set)
    comm_done: dict[int, set] = defaultdict(set)
    issue_tick: dict[tuple[int, int], int] = {}
    callback_tick: dict[tuple[int, int], int] = {}
    for log in sorted((run / "log").glob("log*.log")):
        for line in log.read_text().splitlines():
            m = LINE.search(line)
            if not m:
                continue
            kind, rank, tick, node, ntype = m.group(1), *map(int, m.group(2, 3, 4, 5))
            if kind == "issue":
                issued[rank].add(node)
                issue_tick[rank, node] = tick
            else:
                done[rank].add(node)
                callback_tick[rank, node] = tick
                if ntype in COMM_TYPES:
                    comm_done[rank].add(node)
    finished = {int(r): (int(t), int(e)) for r, t, e in
                FINISHED.findall((run / "out.txt").read_text())}
    world = json.loads(export.with_name(f"{export.name}.summary.json").read_text())["ranks"]
    out = out or ROOT / "tests" / "cases" / "astra-sim"
    with open(out / f"{name}-ranks.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["rank", "nodes_issued", "nodes_completed", "comm_nodes_completed",
                    "finished_ns", "exposed_comm_ns"])
        for r in range(world):
            w.writerow([r, len(issued[r]), len(done[r]), len(comm_done[r]), *finished[r]])
    if ranks_only:
        return
    by_call: dict[int, list[tuple[int, int]]] = defaultdict(list)
    rank0 = []
    for r in range(world):
        for node in decode(export.with_name(f"{export.name}.{r}.et"))[1]:
            a = attrs(node)
            if "call_id" in a:
                by_call[a["call_id"]].append((r, node.id))
                if r == 0 and node.type == 7:
                    rank0.append(a["call_id"])
    with open(out / f"{name}-calls.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["call_id", "ranks", "first_issue_ns", "last_issue_ns", "last_callback_ns"])
        for cid in sorted(rank0):
            nodes = by_call[cid]
            issues = [issue_tick[k] for k in nodes]
            w.writerow([cid, len({r for r, _ in nodes}), min(issues), max(issues),
                        max(callback_tick[k] for k in nodes)])


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--ranks-only"]
    main(Path(args[0]), Path(args[1]), args[2], "--ranks-only" in sys.argv,
         Path(args[3]) if len(args) > 3 else None)
