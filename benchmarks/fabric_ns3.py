"""The queued fabric's oracle side by side: the HPCC ns-3 simulator on an incast, its CPU time and
packet-hops per CPU second (our own engine's numbers are to be added beside it).

Workload: ``S`` senders (hosts 1..S) each send one ``M`` MiB flow to host 0 at 2 s, through one
switch (``export --to hpcc``'s ``single-switch`` topology: 64 hosts of Dante's 400 Gb/s cluster,
PMTU 4096, 500 ns links); the simulator's config is the export's for each ``--cc``: ``none``
(CC_MODE 0, PFC only) and ``dcqcn`` by default. tests/cases/hpcc/README.md keeps the results of
the same runs as fixtures.

Columns per run: flows completed, span (first start to last ACK), min/max FCT, PFC lines of
pfc.txt, CPU seconds of the simulator process (user + system, ``os.wait4``), the program's own
``clock()`` line, wall seconds, packet-hops and packet-hops per CPU second. Packet-hops = frames
put on a link: every data packet and its ACK cross two links (host-switch-host), every PFC frame
one, so ``4 · packets + PFC lines``; ``--trace-reader`` checks that count in a second run with
every node traced, against the ``Dequ`` events of ``analysis/trace_reader`` (one per frame
dequeued onto a link).

Without ``--sim`` (or with a path that is not there) it says so and exits 0: the simulator is
built outside this repository as ``docs/compare.md`` describes.

Run: ``python benchmarks/fabric_ns3.py --sim /work/ns3/simulation/build/scratch/third
[--senders 63] [--size-mib 16] [--cc none --cc dcqcn] [--trace-reader PATH] [--keep DIR]``
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))                 # this checkout's package, whatever is installed

from common import loadavg, machine  # noqa: E402

from tokenpcap.config.profiles import load_scenario  # noqa: E402
from tokenpcap.export.hpcc import write_hpcc  # noqa: E402
from tokenpcap.export.hpcc_fct import read_fct  # noqa: E402
from tokenpcap.export.hpcc_pfc import read_pfc  # noqa: E402
from tokenpcap.records import MESSAGE_DTYPE  # noqa: E402

HOSTS = 64
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


def write_inputs(folder: Path, senders: int, size_bytes: int, cc: str,
                 trace_nodes: tuple[int, ...] = ()) -> Path:
    """The incast's four files in ``folder`` (``incast.txt`` and siblings); returns the config."""
    cluster = load_scenario(DANTE).cluster
    cluster = dataclasses.replace(cluster, nodes=HOSTS // cluster.nics_per_node)
    m = np.zeros(senders, MESSAGE_DTYPE)
    m["src_nic"], m["dst_nic"], m["size_bytes"] = np.arange(1, senders + 1), 0, size_bytes
    paths = write_hpcc(m, cluster, folder / "incast.txt", cc=cc, topology="single-switch",
                       trace_nodes=trace_nodes)
    return paths[2]


def run_sim(sim: Path, config: Path) -> tuple[float, float, str]:
    """Run ``third`` on ``config`` in its folder: (CPU s user + system, wall s, last line)."""
    env = dict(os.environ)
    lib = str(sim.resolve().parents[1])        # build/scratch/third -> build/ (the ns-3 libraries)
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"]
                                    if env.get("LD_LIBRARY_PATH") else "")
    out = config.parent / "stdout.txt"
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        proc = subprocess.Popen([str(sim), config.name], cwd=config.parent, env=env, stdout=f,
                                stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = out.read_text(errors="replace").splitlines()
    if proc.returncode != 0:
        raise SystemExit(f"{sim}: exited {proc.returncode}: {' / '.join(lines[-3:])}")
    return ru.ru_utime + ru.ru_stime, wall, lines[-1] if lines else ""


def count_dequeues(reader: Path, trace: Path) -> int:
    """``Dequ`` events in a binary ``mix.tr`` (frames put on a link), via trace_reader."""
    n = 0
    with subprocess.Popen([str(reader), str(trace)], stdout=subprocess.PIPE) as p:
        for line in p.stdout:
            if b" Dequ " in line:
                n += 1
    return n


def one(sim: Path, folder: Path, senders: int, size_bytes: int, cc: str,
        reader: Path | None) -> None:
    config = write_inputs(folder, senders, size_bytes, cc)
    cpu, wall, clock = run_sim(sim, config)
    fct = read_fct(folder / "incast-fct.txt")
    pfc = read_pfc(folder / "incast-pfc.txt")
    payload = int(dict(line.split(" ", 1) for line in config.read_text().splitlines())
                  ["PACKET_PAYLOAD_SIZE"])
    packets = int((-(-fct["size_bytes"] // payload)).sum())
    hops = 4 * packets + pfc.size
    span = int((fct["start_ns"] + fct["fct_ns"]).max() - fct["start_ns"].min()) if fct.size else 0
    print(f"  cc {cc:<6} flows {fct.size}/{senders}  span {span:,} ns  FCT min/max "
          f"{int(fct['fct_ns'].min()) if fct.size else 0:,}/"
          f"{int(fct['fct_ns'].max()) if fct.size else 0:,} ns  PFC lines {pfc.size:,}")
    print(f"    CPU {cpu:.2f} s (program's clock {clock.strip()} s)  wall {wall:.2f} s  "
          f"packet-hops {hops:,}  {hops / cpu if cpu else float('nan'):,.0f} hops per CPU-s")
    if reader is not None:
        traced = folder / "traced"
        traced.mkdir()
        config = write_inputs(traced, senders, size_bytes, cc, tuple(range(HOSTS + 1)))
        tcpu, twall, _ = run_sim(sim, config)
        deq = count_dequeues(reader, traced / "incast-mix.tr")
        same = (traced / "incast-fct.txt").read_bytes() == (folder / "incast-fct.txt").read_bytes()
        print(f"    traced (every node): {deq:,} Dequ events "
              f"({'=' if deq == hops else '!='} 4 x packets + PFC lines); CPU {tcpu:.2f} s, "
              f"wall {twall:.2f} s; fct.txt {'identical' if same else 'DIFFERS'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", type=Path, help="HPCC ns-3's build/scratch/third")
    ap.add_argument("--senders", type=int, default=63, help="1..63 [63]")
    ap.add_argument("--size-mib", type=float, default=16.0, help="per flow [16]")
    ap.add_argument("--cc", action="append", choices=("none", "dcqcn", "hpcc"),
                    help="congestion control, repeatable [none, dcqcn]")
    ap.add_argument("--trace-reader", type=Path, help="analysis/trace_reader: check the hops")
    ap.add_argument("--keep", type=Path, help="leave the inputs and outputs in this folder")
    a = ap.parse_args()
    if a.sim is None or not a.sim.is_file():
        why = "no --sim given" if a.sim is None else f"{a.sim}: no such file"
        print(f"HPCC ns-3 simulator not available ({why}); build it as "
              f"docs/compare.md describes and pass --sim .../build/scratch/third. Nothing run.")
        return
    if not 1 <= a.senders < HOSTS:
        ap.error(f"--senders: got {a.senders}, expected 1 to {HOSTS - 1}")
    size = int(a.size_mib * (1 << 20))
    reader = a.trace_reader if a.trace_reader and a.trace_reader.is_file() else None
    print(f"machine: {machine()}; load {loadavg()}")
    print(f"incast {a.senders} -> 1 x {size:,} B, 400 Gb/s, one switch, {HOSTS} hosts; "
          f"simulator {a.sim}")
    for cc in a.cc or ["none", "dcqcn"]:
        if a.keep:
            folder = a.keep / cc
            folder.mkdir(parents=True, exist_ok=True)
            one(a.sim, folder, a.senders, size, cc, reader)
        else:
            with tempfile.TemporaryDirectory(prefix="fabric_ns3_") as d:
                one(a.sim, Path(d), a.senders, size, cc, reader)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
