"""DCQCN in our queued fabric side by side with HPCC ns-3's DCQCN, in one run: CPU seconds and
packet-hops per CPU second of each on the same job.

Cases:

1. ``incast``: 63 -> 1 x 16 MiB through one switch. Ours: ``profiles/scenarios/
   incast-63x16m-hpcc-ns3-dcqcn.yaml`` (preset ``hpcc-ns3``, ``fabric.cc: dcqcn``), the
   ``Schedule`` built first, then only ``run()`` timed (``nics=()``: no frame made), best of
   ``--repeat``; packet-hops = link traversals (``Schedule.fabric_counters``), with its CE
   marks and CNPs. ns-3: ``benchmarks/fabric_ns3.py``'s inputs with ``cc="dcqcn"``
   (``CC_MODE 1``), the whole process timed (``os.wait4``); its packet-hops ``4 x packets + PFC
   lines`` (a data packet and its ACK cross two links each, the CNP rides in the ACK: checked
   against a traced run's ``Dequ`` events in tests/cases/hpcc/README.md).
2. ``mixtral``: ``mixtral-8x7b-ep --scale 64`` with ``fabric: {model: queued, preset: hpcc-ns3,
   cc: dcqcn}`` (rail-optimized: 8 leaves, 8 spines, as ``export --to hpcc`` writes), in a fresh
   process (``fabric_engine.py --child``: build and ``run()`` CPU, peak RSS). ns-3: ``export
   --to hpcc --hpcc-cc dcqcn --scale 64`` run by the simulator; its packet-hops
   ``sum over flows of 2 x links x packets + PFC lines`` (``links`` 2 between hosts on one leaf,
   4 across: read from the topology file; an ACK per packet, ``L2_ACK_INTERVAL 1``). Ours runs
   the training job closed loop (a message waits for what it depends on); ns-3 runs the same
   job's flows open loop at our ideal-fabric start times: the same messages, not the same
   experiment (``openloop_hpcc.py`` runs the open loop in our engine).

``--quick``: incast 8 -> 1 x 1 MiB and ``dante --scale 64`` in place of mixtral (the smoke
test). Without ``--sim`` (default ``$HPCC_NS3_SIM``) only our side runs.

Run: ``python benchmarks/fabric_dcqcn.py [--sim .../build/scratch/third] [--case incast|mixtral]
[--repeat 3] [--quick]``
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))                 # this checkout's package, whatever is installed

import fabric_ns3  # noqa: E402
from common import loadavg, machine  # noqa: E402
from fabric_engine import (_ns3_env, _spread, best_of, in_child, measured,  # noqa: E402
                           scenario_copy, span_ns, warm_up)

from tokenpcap.export.hpcc_fct import read_fct  # noqa: E402
from tokenpcap.export.hpcc_pfc import read_pfc  # noqa: E402

SCENARIOS = ROOT / "profiles" / "scenarios"
QUEUED_DCQCN = {"model": "queued", "preset": "hpcc-ns3", "cc": "dcqcn"}


def _config(path: Path) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in path.read_text().splitlines() if " " in line)


def ns3_hops(folder: Path, config: Path) -> tuple[int, int, int, int]:
    """``(packet-hops, flows completed, PFC lines, span ns)`` of a finished ns-3 run of
    ``config`` in ``folder`` (module docstring)."""
    cfg = _config(config)
    payload = int(cfg["PACKET_PAYLOAD_SIZE"])
    lines = (folder / cfg["TOPOLOGY_FILE"]).read_text().split("\n")
    nodes, _, links = map(int, lines[0].split())
    switch = set(map(int, lines[1].split()))
    up = {}
    for line in lines[2:2 + links]:
        a, b = map(int, line.split()[:2])
        for h, s in ((a, b), (b, a)):
            if h not in switch and s in switch:
                up[h] = s
    fct = read_fct(folder / cfg["FCT_OUTPUT_FILE"])
    pfc = read_pfc(folder / cfg["PFC_OUTPUT_FILE"])
    leaf = np.array([up.get(h, -1) for h in range(nodes)])
    path_links = np.where(leaf[fct["src"]] == leaf[fct["dst"]], 2, 4)
    packets = np.maximum(1, -(-fct["size_bytes"] // payload))
    hops = int((2 * path_links * packets).sum()) + pfc.size
    span = int((fct["start_ns"] + fct["fct_ns"]).max() - fct["start_ns"].min()) if fct.size else 0
    return hops, int(fct.size), int(pfc.size), span


def _ns3_line(got: dict, hops: int, flows: int, pfc: int, span: int) -> float:
    rate = hops / got["cpu_s"]
    print(f"  HPCC ns-3, CC_MODE 1 (DCQCN)  span {span:>14,} ns  {got['cpu_s']:7.2f} s cpu "
          f"(whole process, wall {got['wall_s']:.1f} s)  peak {got['peak_bytes'] / 2**20:.0f} "
          f"MiB  flows {flows:,}  packet-hops {hops:>11,}  PFC lines {pfc:,}  "
          f"{rate:>12,.0f} hops per CPU-s")
    return rate


def incast(folder: Path, sim: Path | None, quick: bool, repeat: int) -> None:
    senders, size = (8, 1 << 20) if quick else (63, 16 << 20)
    print(f"1. incast {senders} -> 1 x {size:,} B, one switch, 400 Gb/s, DCQCN "
          f"(load {loadavg()})")
    path = scenario_copy(SCENARIOS / "incast-63x16m-hpcc-ns3-dcqcn.yaml", folder, "bench",
                         workload={"senders": senders, "bytes": size})
    r, cpu = best_of(path, repeat)
    c = r["counters"]
    ours = c["packet_hops"] / r["run_s"]
    print(f"  ours, hpcc-ns3 + cc dcqcn     span {span_ns(r['messages']):>14,} ns  "
          f"{r['run_s']:7.2f} s cpu of run() {_spread(cpu)} (build {r['build_s']:.2f} s)  "
          f"packet-hops {c['packet_hops']:>11,}  PFC frames {c['pfc_frames']:,}  CE marks "
          f"{c['ce_marks']:,}  CNPs {c['cnps']:,}  {ours:>12,.0f} hops per CPU-s")
    if sim is None:
        print("  HPCC ns-3: not run (no --sim / $HPCC_NS3_SIM)")
        return
    inputs = folder / "ns3-incast"
    inputs.mkdir()
    config = fabric_ns3.write_inputs(inputs, senders, size, "dcqcn")
    got = measured([str(sim), config.name], cwd=inputs, env=_ns3_env(sim),
                   out=inputs / "stdout.txt")
    rate = _ns3_line(got, *ns3_hops(inputs, config))
    print(f"  ours / ns-3: CPU {r['run_s'] / got['cpu_s']:.2f}x, hops per CPU-s "
          f"{ours / rate:.2f}x")


def mixtral(folder: Path, sim: Path | None, name: str, scale: int) -> None:
    src = SCENARIOS / f"{name}.yaml"
    print(f"2. {name} --scale {scale}, DCQCN, ours in a fresh process (load {loadavg()})")
    r = in_child(scenario_copy(src, folder, "dcqcn", QUEUED_DCQCN), scale)
    c = r["counters"]
    ours = c["packet_hops"] / r["run_s"]
    print(f"  ours, hpcc-ns3 + cc dcqcn     iteration {r['iteration_ns']:>14,} ns  "
          f"{r['run_s']:7.2f} s cpu of run() (build {r['build_s']:.2f} s, process "
          f"{r['process_cpu_s']:.2f} s)  peak {r['peak_bytes'] / 2**20:.0f} MiB  "
          f"{r['messages']:,} msgs  packet-hops {c['packet_hops']:>11,}  PFC frames "
          f"{c['pfc_frames']:,}  CE marks {c['ce_marks']:,}  CNPs {c['cnps']:,}  "
          f"{ours:>12,.0f} hops per CPU-s")
    if sim is None:
        print("  HPCC ns-3: not run (no --sim / $HPCC_NS3_SIM)")
        return
    out = folder / "ns3-mixtral"
    measured([sys.executable, "-m", "tokenpcap", "export", str(src), "--to", "hpcc", "--scale",
              str(scale), "--hpcc-cc", "dcqcn", "-o", str(out / f"{name}.txt")], cwd=ROOT)
    config = out / f"{name}-config.txt"
    got = measured([str(sim), config.name], cwd=out, env=_ns3_env(sim), out=out / "stdout.txt")
    rate = _ns3_line(got, *ns3_hops(out, config))
    print(f"  ours / ns-3: CPU {r['run_s'] / got['cpu_s']:.2f}x (run()), "
          f"{r['process_cpu_s'] / got['cpu_s']:.2f}x (whole process); hops per CPU-s "
          f"{ours / rate:.2f}x")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", type=Path, default=os.environ.get("HPCC_NS3_SIM") or None,
                    help="HPCC ns-3's build/scratch/third [$HPCC_NS3_SIM]")
    ap.add_argument("--case", action="append", choices=("incast", "mixtral"),
                    help="only these cases (repeatable) [both]")
    ap.add_argument("--repeat", type=int, help="timed runs of the incast, best kept [3]")
    ap.add_argument("--quick", action="store_true", help="smoke run at small sizes")
    a = ap.parse_args(argv)
    sim = a.sim if a.sim is not None and a.sim.is_file() else None
    repeat = a.repeat or (1 if a.quick else 3)
    cases = a.case or ["incast", "mixtral"]
    print(f"{machine()}; load {loadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
          f"; ns-3 {sim or 'not given'}")
    with tempfile.TemporaryDirectory(prefix="fabric_dcqcn_") as d:
        folder = Path(d)
        if not a.quick:                       # a smoke run's times say nothing: no warm-up
            warm_up(folder)
        if "incast" in cases:
            incast(folder, sim, a.quick, repeat)
        if "mixtral" in cases:
            mixtral(folder, sim, "dante" if a.quick else "mixtral-8x7b-ep", 64)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
