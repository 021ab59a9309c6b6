"""The queued fabric of the compiled engine side by side with the ideal fabric and with HPCC ns-3,
in one run: CPU seconds, packet-hops per CPU second, peak memory and the times each gives.

Cases:

1. ``incast``: 63 -> 1 x 16 MiB through one switch (``profiles/scenarios/incast-63x16m*.yaml``:
   preset ``hpcc-ns3`` and the default Tomahawk 5 one). Ours: the ``Schedule`` is built first,
   then only ``run()`` is timed (``nics=()``: no frame made); packet-hops = link traversals
   (``Schedule.fabric_counters``). Beside it, with ``--sim``, HPCC ns-3 on the same incast
   (``benchmarks/fabric_ns3.py``'s inputs: ``CC_MODE 0``, PFC only; its packet-hops are
   ``4 x packets + PFC lines``, checked there against the simulator's own trace). Spans: ours
   is the first start to the last message's arrival (its last byte at host 0), ns-3's the first
   start to the last ACK back at a sender (one more 2 x 500 ns + 2 x 1 ns).
2. ``mixtral``: ``mixtral-8x7b-ep`` at ``--scale 64`` on its cluster as is (ideal) and with
   ``fabric: {model: queued, preset: hpcc-ns3}`` (rail-optimized: 8 leaves, 8 spines), each in a
   fresh process (peak RSS from ``os.wait4``): CPU seconds of the build and of ``run()``, the
   iteration (end of the last optimizer step), and per phase label the messages' summed transit
   (``arrival_ns - ready_ns``) ideal vs queued. ns-3's CPU seconds on the same job are the
   fixtures' (``tests/cases/hpcc/README.md``); ``--ns3-mixtral`` runs it here too (export
   ``--to hpcc --hpcc-cc none --scale 64``, ~45 CPU s).
3. ``ring``: rail-aligned rings on a non-blocking fabric, ideal vs ``fabric: {model: queued}``
   (rail-optimized, Tomahawk 5 defaults): an AllReduce of 256 MiB on 8 nodes x 8 NICs
   (nccl-tests ``all_reduce_perf -b 256M``) and ``dante``: CPU-seconds ratio of ``run()``, with no
   frame made and with NIC 0's frames (``nics=(0,)``, what ``generate --nics 0`` times), and the
   iteration-time difference.
4. ``gpt3`` (only with ``--gpt3``): ``generate gpt3-175b-megatron --nics 0-7 --snaplen 74
   --format pcap`` with the queued rail-optimized fabric in a fresh process (``--gpt3-scale``;
   ``--gpt3-ideal`` also the ideal one): wall and CPU seconds, peak RSS, bytes written.

Cases 1 and 3 time the queued fabric on both of its paths, per-packet and fast
(:mod:`tokenpcap.schedule.engine.fabric_fast`: the same results, fewer events), with the events
(heap insertions) per packet-hop of each.

Every case runs in this process or its children one after the other; the compiled engine is
warmed up first (its first use in a fresh environment compiles it). ``--quick`` is a smoke run at
small sizes (incast 8 -> 1 x 1 MiB, case 2 on ``dante --scale 64`` in place of mixtral, whose
1.26 M messages take seconds at any scale, 1 MiB AllReduce, dante ``--scale 64``).

Run: ``python benchmarks/fabric_engine.py [--sim .../build/scratch/third] [--ns3-mixtral]
[--gpt3 [--gpt3-scale 100] [--gpt3-ideal]] [--repeat 3] [--quick]``
(``--sim`` defaults to ``$HPCC_NS3_SIM``.)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))                 # this checkout's package, whatever is installed

import fabric_ns3  # noqa: E402
from common import loadavg, machine  # noqa: E402

from tokenpcap.config.profiles import load_scenario  # noqa: E402
from tokenpcap.export.hpcc_fct import read_fct  # noqa: E402
from tokenpcap.export.hpcc_pfc import read_pfc  # noqa: E402
from tokenpcap.plan.build import build_plan  # noqa: E402
from tokenpcap.records import KIND_DATA, LABELS, label_codes  # noqa: E402
from tokenpcap.schedule.engine import events as K  # noqa: E402
from tokenpcap.schedule.engine import fabstate  # noqa: E402
from tokenpcap.schedule.runner import Schedule  # noqa: E402

SCENARIOS = ROOT / "profiles" / "scenarios"
QUEUED_NS3 = {"model": "queued", "preset": "hpcc-ns3"}
QUEUED = {"model": "queued"}
#: the queued fabric's two paths (module tokenpcap.schedule.engine.fabric_fast), same results
PATHS = {False: "per-packet", True: "fast"}
#: tests/cases/hpcc/README.md: mixtral-8x7b-ep --scale 64 in HPCC ns-3 (CPU s, time / clock)
NS3_MIXTRAL_CPU_S = {"dcqcn": 38.44, "pfc (CC_MODE 0)": 43.92}


# ------------------------------------------------------------------ scenario copies
def scenario_copy(src: Path, folder: Path, tag: str, fabric: dict | None = None,
                  workload: dict | None = None) -> Path:
    """``src`` written to ``folder`` with absolute paths and its cluster inline, ``fabric`` set on
    it (None: as it is) and ``workload`` keys updated; returns the new file."""
    data = yaml.safe_load(src.read_text())
    base = src.resolve().parent
    for key in ("corpus", "model"):
        if isinstance(data.get(key), str):
            data[key] = str((base / data[key]).resolve())
    if isinstance(data.get("cluster"), str):
        data["cluster"] = yaml.safe_load((base / data["cluster"]).read_text())
    if fabric is not None:
        data["cluster"]["fabric"] = fabric
    if workload:
        data["workload"] = {**data["workload"], **workload}
    data["name"] = f"{data['name']}-{tag}"
    out = folder / f"{data['name']}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


# ------------------------------------------------------------------ one schedule, timed
def timed_run(path: Path, scale: int = 1, keep_history: bool = False, nics=(),
              fast: bool = True) -> dict:
    """Build the schedule of ``path`` (every message kept; frames made for ``nics`` only, none by
    default), then time ``run()``: CPU seconds of each, the frames, the fabric's counters, the
    message table and the timeline. ``fast``: the queued fabric's fast path on (else its
    per-packet path, :mod:`tokenpcap.schedule.engine.fabric_fast`)."""
    fabstate.FAST_PATH = fast
    plan = build_plan(load_scenario(path), scale=scale)
    c = time.process_time()
    sched = Schedule(plan, iterations=1, nics=nics, keep_history=keep_history, keep_nvlink=False)
    build = time.process_time() - c
    frames = 0
    c, w = time.process_time(), time.perf_counter()
    for tx in sched.run():
        frames += tx.size
    run, wall = time.process_time() - c, time.perf_counter() - w
    m = sched.messages
    tl = sched.timeline if keep_history else None
    fabstate.FAST_PATH = True
    return dict(build_s=build, run_s=run, wall_s=wall, messages=m, timeline=tl, frames=frames,
                counters=sched.fabric_counters if sched.fabric_queued else {},
                events=int(sched._eng.sc[K.SEQ]))


def warm_up(folder: Path) -> None:
    """Load (or compile) the engine for both fabrics outside any timing."""
    timed_run(SCENARIOS / "gpt2-all-cross.yaml", scale=64)
    timed_run(scenario_copy(SCENARIOS / "incast-63x16m-hpcc-ns3.yaml", folder, "warm",
                            workload={"senders": 2, "bytes": 65536}))


def span_ns(m: np.ndarray) -> int:
    """First start to last arrival of the data messages (ns)."""
    d = m[m["kind"] == KIND_DATA]
    return int(d["arrival_ns"].max() - d["start_ns"].min()) if d.size else 0


def iteration_ns(r: dict) -> int:
    """End of the iteration: the last optimizer step's end, else the last message's arrival."""
    tl = r["timeline"]
    if tl is not None and tl.size:
        return int(tl["end_ns"].max())
    return int(r["messages"]["arrival_ns"].max())


def best_of(path: Path, repeat: int, scale: int = 1, keep_history: bool = False,
            nics=(), fast: bool = True) -> tuple[dict, list[float]]:
    runs = [timed_run(path, scale, keep_history, nics, fast) for _ in range(repeat)]
    cpu = [r["run_s"] for r in runs]
    return runs[int(np.argmin(cpu))], cpu


def _spread(xs: list[float]) -> str:
    return f"(best of {len(xs)}, spread {(max(xs) - min(xs)) / min(xs):.0%})" if len(xs) > 1 else ""


# ------------------------------------------------------------------ processes
def measured(cmd: list[str], cwd: Path | None = None, env: dict | None = None,
             out: Path | None = None) -> dict:
    """Run ``cmd`` to its end: CPU s (user + system, its waited-for children included), wall s,
    peak RSS (bytes) from ``os.wait4``, and its stdout (when not sent to ``out``)."""
    t0 = time.perf_counter()
    with (open(out, "wb") if out else tempfile.TemporaryFile()) as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        f.seek(0)
        text = "" if out else f.read().decode(errors="replace")
    wall = time.perf_counter() - t0
    code = proc.returncode
    if code != 0:
        raise SystemExit(f"{cmd[0]} ... exited {code}: {text[-2000:]}")
    return dict(cpu_s=ru.ru_utime + ru.ru_stime, wall_s=wall, peak_bytes=ru.ru_maxrss * 1024,
                stdout=text)


def child(path: Path, scale: int) -> None:
    """``--child``: one schedule in this fresh process; one JSON line of what the parent prints."""
    with tempfile.TemporaryDirectory(prefix="fabric_engine_") as d:
        warm_up(Path(d))
    r = timed_run(path, scale, keep_history=True)
    m = r["messages"]
    codes = label_codes(m)
    transit = (m["arrival_ns"] - m["ready_ns"]).astype(np.int64)
    labels = {}
    for c in np.unique(codes):
        sel = codes == c
        labels[LABELS[int(c)]] = [int(sel.sum()), int(m["size_bytes"][sel].sum()),
                                  int(transit[sel].sum())]
    print(json.dumps(dict(build_s=r["build_s"], run_s=r["run_s"], wall_s=r["wall_s"],
                          messages=int(m.size), iteration_ns=iteration_ns(r),
                          counters=r["counters"], labels=labels)))


def in_child(path: Path, scale: int) -> dict:
    got = measured([sys.executable, "-W", "error", __file__, "--child", str(path),
                    "--child-scale", str(scale)], cwd=ROOT)
    res = json.loads(got["stdout"].strip().splitlines()[-1])
    res.update(process_cpu_s=got["cpu_s"], peak_bytes=got["peak_bytes"])
    return res


def _ns3_env(sim: Path) -> dict:
    env = dict(os.environ)
    lib = str(sim.resolve().parents[1])
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"]
                                    if env.get("LD_LIBRARY_PATH") else "")
    return env


# ------------------------------------------------------------------ the cases
def incast(folder: Path, sim: Path | None, quick: bool, repeat: int) -> None:
    senders, size = (8, 1 << 20) if quick else (63, 16 << 20)
    print(f"1. incast {senders} -> 1 x {size:,} B, one switch, 400 Gb/s "
          f"(run() alone, nics=(); load {loadavg()})")
    rates = {}
    for name, tag in (("incast-63x16m-hpcc-ns3", "hpcc-ns3 preset"), ("incast-63x16m", "th5-400g "
                                                                                       "default")):
        path = scenario_copy(SCENARIOS / f"{name}.yaml", folder, "bench",
                             workload={"senders": senders, "bytes": size})
        for fast in (False, True):
            r, cpu = best_of(path, repeat, fast=fast)
            c = r["counters"]
            rate = c["packet_hops"] / r["run_s"]
            if fast:
                rates[tag] = rate
            print(f"  ours, {tag:<16} {PATHS[fast]:<10} span {span_ns(r['messages']):>12,} ns  run "
                  f"{r['run_s']:6.2f} s cpu {_spread(cpu)} (build {r['build_s']:.2f} s)  "
                  f"packet-hops {c['packet_hops']:>10,}  PFC frames {c['pfc_frames']:>8,}  "
                  f"{rate:>12,.0f} hops per CPU-s  events {r['events'] / c['packet_hops']:.2f} "
                  "per hop")
    if sim is None:
        print("  HPCC ns-3: not run (no --sim / $HPCC_NS3_SIM)")
        return
    inputs = folder / "ns3-incast"
    inputs.mkdir()
    config = fabric_ns3.write_inputs(inputs, senders, size, "none")
    got = measured([str(sim), config.name], cwd=inputs, env=_ns3_env(sim),
                   out=inputs / "stdout.txt")
    fct, pfc = read_fct(inputs / "incast-fct.txt"), read_pfc(inputs / "incast-pfc.txt")
    payload = int(dict(line.split(" ", 1) for line in config.read_text().splitlines())
                  ["PACKET_PAYLOAD_SIZE"])
    hops = 4 * int((-(-fct["size_bytes"] // payload)).sum()) + pfc.size
    span = int((fct["start_ns"] + fct["fct_ns"]).max() - fct["start_ns"].min())
    ns3_rate = hops / got["cpu_s"]
    print(f"  HPCC ns-3, CC_MODE 0       span {span:>12,} ns  run {got['cpu_s']:6.2f} s cpu "
          f"(whole process, wall {got['wall_s']:.2f} s)  packet-hops {hops:>10,}  PFC lines "
          f"{pfc.size:>8,}  {ns3_rate:>12,.0f} hops per CPU-s  peak {got['peak_bytes'] / 2**20:.0f} MiB")
    print("  ratio hops per CPU-s ours / ns-3: " + ", ".join(
        f"{tag} {rate / ns3_rate:.2f}x" for tag, rate in rates.items()))


def _labels_table(ideal: dict, queued: dict) -> None:
    rows = sorted(set(ideal) | set(queued), key=lambda k: -queued.get(k, [0, 0, 0])[2])
    print(f"    {'phase label':<26} {'messages':>9} {'bytes':>15} {'transit ideal':>15} "
          f"{'queued':>15} {'queued/ideal':>12}")
    for k in rows:
        n, b, ti = ideal.get(k, [0, 0, 0])
        _, _, tq = queued.get(k, [0, 0, 0])
        ratio = f"{tq / ti:11.2f}x" if ti else "           -"
        print(f"    {k:<26} {n:>9,} {b:>15,} {ti / 1e6:>12,.3f} ms {tq / 1e6:>12,.3f} ms {ratio}")


def mixtral(folder: Path, sim: Path | None, run_ns3: bool, name: str, scale: int) -> None:
    src = SCENARIOS / f"{name}.yaml"
    print(f"2. {name} --scale {scale}, fresh process each (load {loadavg()})")
    paths = {"ideal": src, "queued hpcc-ns3": scenario_copy(src, folder, "queued", QUEUED_NS3)}
    res = {k: in_child(p, scale) for k, p in paths.items()}
    for k, r in res.items():
        c = r["counters"]
        extra = (f"  packet-hops {c['packet_hops']:,}  PFC frames {c['pfc_frames']:,}  "
                 f"{c['packet_hops'] / r['run_s']:,.0f} hops per CPU-s" if c else "")
        print(f"  {k:<17} iteration {r['iteration_ns']:>14,} ns  build {r['build_s']:6.2f} s  "
              f"run {r['run_s']:6.2f} s cpu ({r['wall_s']:.2f} s wall)  process "
              f"{r['process_cpu_s']:6.2f} s cpu  peak {r['peak_bytes'] / 2**20:6.0f} MiB  "
              f"{r['messages']:,} msgs{extra}")
    i, q = res["ideal"], res["queued hpcc-ns3"]
    print(f"  queued / ideal: run CPU {q['run_s'] / i['run_s']:.2f}x, peak RSS "
          f"{q['peak_bytes'] / i['peak_bytes']:.2f}x, iteration +{q['iteration_ns'] - i['iteration_ns']:,} "
          f"ns ({q['iteration_ns'] / i['iteration_ns'] - 1:+.2%})")
    print("  per phase label, summed transit (arrival - ready) of its messages:")
    _labels_table(i["labels"], q["labels"])
    if name != "mixtral-8x7b-ep" or scale != 64:
        return
    print("  HPCC ns-3 on the same job (tests/cases/hpcc/README.md): " + ", ".join(
        f"{k} {v:.2f} s cpu" for k, v in NS3_MIXTRAL_CPU_S.items())
        + f"; queued run / ns-3: {q['run_s'] / NS3_MIXTRAL_CPU_S['pfc (CC_MODE 0)']:.3f}x")
    if run_ns3 and sim is not None:
        out = folder / "ns3-mixtral"
        measured([sys.executable, "-m", "tokenpcap", "export", str(src), "--to", "hpcc",
                  "--scale", str(scale), "--hpcc-cc", "none", "-o", str(out / "mixtral.txt")],
                 cwd=ROOT)
        got = measured([str(sim), "mixtral-config.txt"], cwd=out, env=_ns3_env(sim),
                       out=out / "stdout.txt")
        fct = read_fct(out / "mixtral-fct.txt")
        print(f"  HPCC ns-3 here, CC_MODE 0: {fct.size:,} flows, {got['cpu_s']:.2f} s cpu, "
              f"{got['wall_s']:.1f} s wall, peak {got['peak_bytes'] / 2**20:.0f} MiB; queued run "
              f"/ ns-3 {q['run_s'] / got['cpu_s']:.3f}x")


def ring(folder: Path, quick: bool, repeat: int) -> None:
    print(f"3. rail-aligned rings, non-blocking rail-optimized fabric (th5-400g), run() alone "
          f"(load {loadavg()})")
    size = (1 << 20) if quick else (256 << 20)
    ar = scenario_copy(SCENARIOS / "alltoall-64.yaml", folder, "allreduce",
                       workload={"kind": "allreduce", "bytes": size})
    cases = [(f"AllReduce {size:,} B, 64 ranks", ar, 1), ("dante", SCENARIOS / "dante.yaml",
                                                          64 if quick else 1)]
    for label, path, scale in cases:
        q_path = scenario_copy(path, folder, "queued", QUEUED)
        name = label + (f" --scale {scale}" if scale > 1 else "")
        for nics, what in (((), "timing only"), ((0,), "NIC 0's frames")):
            i, ci = best_of(path, repeat, scale, True, nics)
            line = f"  {name:<34} {what:<14} ideal run {i['run_s']:6.2f} s cpu {_spread(ci)}"
            for fast in (False, True):
                q, cq = best_of(q_path, repeat, scale, True, nics, fast)
                line += (f"  queued {PATHS[fast]} {q['run_s']:6.2f} s cpu {_spread(cq)} ratio "
                         f"{q['run_s'] / i['run_s']:.2f}x")
            print(line)
        ti, tq = iteration_ns(i), iteration_ns(q)
        c = q["counters"]
        print(f"  {'':<34} iteration ideal {ti:,} ns, queued {tq:,} ns ({tq / ti - 1:+.3%}); "
              f"{i['messages'].size:,} msgs, NIC 0 {q['frames']:,} frames; packet-hops "
              f"{c['packet_hops']:,}, PFC frames {c['pfc_frames']:,}")


def gpt3(folder: Path, scale: int, ideal: bool) -> None:
    src = SCENARIOS / "gpt3-175b-megatron.yaml"
    print(f"4. generate gpt3-175b-megatron --nics 0-7 --snaplen 74 --format pcap --scale {scale} "
          f"(load {loadavg()})")
    cases = [("queued th5-400g", scenario_copy(src, folder, "queued", QUEUED))]
    if ideal:
        cases.insert(0, ("ideal", src))
    for label, path in cases:
        out = folder / f"gpt3-{label.split()[0]}"
        got = measured([sys.executable, "-m", "tokenpcap", "generate", str(path), "-o", str(out),
                        "--nics", "0-7", "--snaplen", "74", "--format", "pcap", "--scale",
                        str(scale)], cwd=ROOT)
        files = [p for p in out.rglob("*") if p.is_file()]
        pcap = [p for p in files if p.suffix == ".pcap"]
        size = sum(p.stat().st_size for p in pcap)
        side = sum(p.stat().st_size for p in files) - size
        print(f"  {label:<16} {got['wall_s']:8.1f} s wall  {got['cpu_s']:8.1f} s cpu  peak "
              f"{got['peak_bytes'] / 2**30:.2f} GiB  {len(pcap)} pcaps, {size:,} B; "
              f"{len(files) - len(pcap)} other files, {side:,} B  (load {loadavg()})")
        for p in files:
            p.unlink()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", type=Path, default=os.environ.get("HPCC_NS3_SIM") or None,
                    help="HPCC ns-3's build/scratch/third [$HPCC_NS3_SIM]")
    ap.add_argument("--ns3-mixtral", action="store_true", help="run ns-3 on mixtral too (~45 s)")
    ap.add_argument("--mixtral-scale", type=int, help="[64]")
    ap.add_argument("--gpt3", action="store_true", help="case 4 (long: minutes at scale 1)")
    ap.add_argument("--gpt3-scale", type=int, default=1)
    ap.add_argument("--gpt3-ideal", action="store_true", help="case 4 on the ideal fabric too")
    ap.add_argument("--repeat", type=int, help="timed runs per in-process case, best kept [3]")
    ap.add_argument("--quick", action="store_true", help="smoke run at small sizes")
    ap.add_argument("--case", action="append", choices=("incast", "mixtral", "ring", "gpt3"),
                    help="only these cases (repeatable) [incast, mixtral, ring; gpt3 with --gpt3]")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-scale", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        child(a.child, a.child_scale)
        return
    sim = a.sim if a.sim is not None and a.sim.is_file() else None
    repeat = a.repeat or (1 if a.quick else 3)
    cases = a.case or ["incast", "mixtral", "ring"] + (["gpt3"] if a.gpt3 else [])
    print(f"{machine()}; load {loadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory(prefix="fabric_engine_") as d:
        folder = Path(d)
        warm_up(folder)
        if "incast" in cases:
            incast(folder, sim, a.quick, repeat)
        if "mixtral" in cases:
            mixtral(folder, sim, a.ns3_mixtral, "dante" if a.quick else "mixtral-8x7b-ep",
                    a.mixtral_scale or 64)
        if "ring" in cases:
            ring(folder, a.quick, repeat)
        if "gpt3" in cases:
            gpt3(folder, a.gpt3_scale, a.gpt3_ideal)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
