"""Where the rows of the engine's call-shape templates come from: per kind of call family (dim,
phase, collective, group size) the distinct shapes, their rows (transfers) and the calls, under
the rule of this tree (:func:`tokenpcap.collectives.canonical.canonical_shape`: whole nodes, and
a local index the group's ranks share where the NICs translate with it) beside the rule of whole
nodes alone. The rows are what ``schedule.limits`` charges ``TEMPLATE_ROW_BYTES`` for.

    python3 benchmarks/template_rows.py --scenario llama3.1-405b-2048 [--scale K]
        [--set parallelism.dp=128 --set training.global_batch_size=2048 --set cluster.nodes=2048]

Each distinct shape's transfers are made once and dropped (``drop_cached``), so the script holds
the plan and one shape at a time (0.7 GB peak at 16,384 GPUs).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)

    import yaml

    from tokenpcap.collectives.canonical import canonical_shape
    from tokenpcap.collectives.transfers import drop_cached
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.flatbuild import shape_transfers

    sets = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in a.sets)}
    t0 = time.perf_counter()
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / f"{a.scenario}.yaml", sets),
                      scale=a.scale)
    lay = plan.layout
    gpn, npn = lay.gpus_per_node, lay.nics_per_node
    print(f"{a.scenario} --scale {a.scale} {' '.join('--set ' + s for s in a.sets)}: "
          f"{lay.world_size:,} GPUs, {plan.calls_per_iteration:,} calls, planned in "
          f"{time.perf_counter() - t0:.1f} s")
    rows: dict = {}                                  # whole-node key -> rows
    kind = defaultdict(lambda: [set(), set(), 0])   # kind -> (node keys, canonical keys, calls)
    for f in plan.families:
        k = (f.dim, f.phase, f.collective, len(f.groups[0]))
        for g in f.groups:
            # nics_per_node 0 never equals gpus_per_node: the rule of whole nodes alone
            node, _ = canonical_shape(f.collective, g, f.message_bytes, f.elem_bytes, gpn, 0)
            canon, _ = canonical_shape(f.collective, g, f.message_bytes, f.elem_bytes, gpn, npn)
            kind[k][0].add(node)
            kind[k][1].add(canon)
            kind[k][2] += len(f.insts)
            for key in (node, canon):
                if key not in rows:
                    rows[key] = len(shape_transfers(key, plan).table)
                    drop_cached()
    print(f"{'dim/phase/collective':<32}{'group':>6}{'calls':>12}{'shapes':>8}{'rows':>14}"
          f"{'shapes':>8}{'rows':>14}")
    print(f"{'':<58}{'(whole nodes)':>22}{'(this tree)':>22}")
    total = [0, 0, 0, 0]
    seen: list[set] = [set(), set()]
    by_rows = sorted(kind.items(), key=lambda kv: -sum(rows[x] for x in kv[1][0]))
    for k, (node, canon, calls) in by_rows:
        rn, rc = sum(rows[x] for x in node), sum(rows[x] for x in canon)
        print(f"{'/'.join(k[:3]):<32}{k[3]:>6,}{calls:>12,}{len(node):>8,}{rn:>14,}"
              f"{len(canon):>8,}{rc:>14,}")
        for i, keys in enumerate((node, canon)):
            new = keys - seen[i]
            seen[i] |= new
            total[2 * i] += len(new)
            total[2 * i + 1] += sum(rows[x] for x in new)
    print(f"{'total (distinct)':<32}{'':>6}{plan.calls_per_iteration:>12,}{total[0]:>8,}"
          f"{total[1]:>14,}{total[2]:>8,}{total[3]:>14,}")
    print(f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
