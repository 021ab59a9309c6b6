"""Open loop against HPCC ns-3: a scenario's ``export --to hpcc`` flows, each started at its
exported time with nothing depending on anything, run through our queued fabric, per phase
label beside the simulator's slowdown on the same flows.

Steps (one process): (1) schedule ``--scenario`` at ``--scale`` as the export does (its own
fabric, ideal for the bundled training scenarios) and write its flow, topology and config files
(``write_hpcc``, ``cc`` none) into ``--dir``; (2) write a ``flows`` workload scenario
(``workload: {kind: flows, file: <the flow file>}``, ``collectives: {channels: 1}``) on the
scenario's cluster with ``--fabric`` set on it (default ``{model: queued, preset: hpcc-ns3}``,
rail-optimized: the leaf-spine the export writes), run it and set its FCT beside (1)'s
(:func:`tokenpcap.export.hpcc_openloop.open_loop_beside`); (3) print per group the slowdown
p50/p90/p99 (our open-loop FCT / (1)'s FCT) beside a fixture's (``--fixture``, default
``tests/cases/hpcc/mixtral-8x7b-ep-scale64-pfc-summary.json``: the simulator's fct / (1)'s, kept
from a run of the same export) with the difference, and the CPU seconds and peak RSS of each step.

``--quick``: the 8 -> 1 x 1 MiB incast on its own hpcc-ns3 single switch, no fixture (its open
loop is the scenario's own schedule: every slowdown 1.000), for the smoke test.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tokenpcap.export.hpcc import START_OFFSET_NS, write_hpcc  # noqa: E402
from tokenpcap.export.hpcc_fct import ours_fct  # noqa: E402
from tokenpcap.export.hpcc_openloop import open_loop_beside  # noqa: E402

FIXTURE = ROOT / "tests" / "cases" / "hpcc" / "mixtral-8x7b-ep-scale64-pfc-summary.json"
QUEUED_NS3 = {"model": "queued", "preset": "hpcc-ns3"}


def flows_scenario(src: Path, flow_file: Path, fabric: dict | None) -> Path:
    """The ``flows`` scenario of ``flow_file`` beside it, on ``src``'s cluster (inline) with
    ``fabric`` set (None: the cluster's own)."""
    data = yaml.safe_load(src.read_text())
    cluster = yaml.safe_load((src.resolve().parent / data["cluster"]).read_text())
    if fabric is not None:
        cluster["fabric"] = fabric
    doc = {"name": f"{data['name']}-flows", "description": f"open loop of {src.name}'s export",
           "cluster": cluster, "workload": {"kind": "flows", "file": flow_file.name},
           "collectives": {"algorithm": "ring", "channels": 1, "slice_bytes": 1 << 20},
           "generation": {"seed": 0, "iterations": 1, "clear_to_send": False,
                          "ack_every_packets": 1}}
    out = flow_file.with_name(f"{data['name']}-flows.yaml")
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "profiles/scenarios/mixtral-8x7b-ep.yaml"))
    ap.add_argument("--scale", type=int, default=64)
    ap.add_argument("--fixture", default=str(FIXTURE), help="summary JSON ('' for none)")
    ap.add_argument("--fabric", default=json.dumps(QUEUED_NS3),
                    help="the flows cluster's fabric mapping, JSON ('' keeps the cluster's)")
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary one)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.scenario, a.scale, a.fixture, a.fabric = (
            str(ROOT / "profiles/scenarios/incast-8x1m-hpcc-ns3.yaml"), 1, "", "")
    src = Path(a.scenario)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        c = time.process_time()
        sched, flows, labels, ours = ours_fct(src, scale=a.scale)
        out = folder / f"{src.stem}.txt"
        write_hpcc(sched.messages, sched.plan.scenario.cluster, out, cc="none")
        t1 = time.process_time() - c
        print(f"1. {src.name} --scale {a.scale}: {flows.size:,} flows exported, schedule on our "
              f"{'queued' if sched.fabric_queued else 'ideal'} fabric: {t1:.1f} CPU-s, "
              f"peak {_peak_mb()} MB")
        del sched
        fs = flows_scenario(src, out, json.loads(a.fabric) if a.fabric else None)
        c = time.process_time()
        ol = open_loop_beside(flows, labels, ours, START_OFFSET_NS, fs,
                              f"export {src} --scale {a.scale}")
        t2 = time.process_time() - c
        print(f"2. open loop on the queued fabric ({fs.name}): {t2:.1f} CPU-s (load, plan, "
              f"build and run), peak {_peak_mb()} MB")
    fx = {}
    if a.fixture:
        fx = {g["group"]: g for g in json.loads(Path(a.fixture).read_text())["groups"]}
    against = f"fixture: {Path(a.fixture).name}" if fx else "open loop alone"
    print(f"3. per-group slowdown, fct / ours ({against}):")
    width = max(len(g["group"]) for g in ol.groups())
    print(f"  {'group':<{width}} {'flows':>7} " + " ".join(
        f"{'ns-3 ' + q:>8} {'open ' + q:>8} {'diff':>6}" for q in ("p50", "p90", "p99")))
    worst = 0.0
    for g in ol.groups():
        s = fx.get(g["group"])
        cells = []
        for q in ("p50", "p90", "p99"):
            if s is None or s[q] is None:
                cells.append(f"{'-':>8} {g[q]:>8.3f} {'-':>6}")
                continue
            d = 100 * (g[q] / s[q] - 1)
            worst = max(worst, abs(d))
            cells.append(f"{s[q]:>8.3f} {g[q]:>8.3f} {d:>+5.1f}%")
        print(f"  {g['group']:<{width}} {g['flows']:>7,} " + " ".join(cells))
    if fx:
        print(f"  largest |difference|: {worst:.1f} %")


if __name__ == "__main__":
    main()
