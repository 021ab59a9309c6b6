"""Simulator result files for the fuzz surfaces (tests/fuzz_surfaces.py): mutated SimAI
``EndToEnd.csv``, HPCC ``fct.txt`` and ``pfc.txt`` from the fixtures of tests/cases, read or
refused in one line, every time read within int64 ns (SimAI writes ``uint64`` µs, ns-3 ``%lu``
ns: nothing larger is theirs).
"""
from __future__ import annotations

import random
from pathlib import Path

from tests.fuzzing import ROOT, WrongOutput, mutate

CASES = ROOT / "tests" / "cases"
INT64 = 1 << 63

_HOSTILE_NUMBERS = ("0", "-0", "-1", "+1", "1e400", "1e-400", "nan", "NaN", "inf", "-inf",
                    "NaN or Inf", "0x10", "0b101", "0o7", "1_000", " 5", "5 ", "", "\u0663",
                    "\uff19", "9" * 18, "9" * 19, "9" * 20, "9" * 300, "9" * 5000,
                    str(INT64 - 1), str(INT64), str((INT64 - 1) // 1000), str(INT64 // 1000 + 1),
                    "1.5", "1e3", "0000201", "0x000201", "0b000201", "+0000201", "0_000201",
                    "ffffffff", "FFFFFFFF", "gggggggg", "00000000", "1 (50.00%)",
                    "99999999999999999999 (100.00%)", "5 (1e400%)", "-5 (-1.00%)")


def seed_file(rng: random.Random, pattern: str) -> bytes:
    files = sorted(CASES.glob(pattern), key=lambda p: p.name)
    data = rng.choice(files).read_bytes()
    return data[:1 << 16]


def mutate_cells(data: bytes, rng: random.Random, sep: str | None) -> bytes:
    """Replace 1-3 cells (split on ``sep``; None: whitespace) by hostile numbers, or fall
    back to the byte mutations of :func:`tests.fuzzing.mutate`."""
    if rng.random() < 0.25:
        return mutate(data, rng)
    lines = data.decode("ascii", "replace").split("\n")
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        cells = lines[i].split(sep) or [""]
        cells[rng.randrange(len(cells))] = rng.choice(_HOSTILE_NUMBERS)
        lines[i] = (sep or " ").join(cells)
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def _times_fit(values, where: str) -> None:
    for v in values:
        if isinstance(v, int) and not -INT64 <= v < INT64:
            raise WrongOutput(f"{where}: a time of {len(str(v))} digits was accepted")


def run_simai(data: bytes, work: Path) -> str:
    from tokenpcap.export.simai_csv import read_end_to_end

    p = work / "EndToEnd.csv"
    p.write_bytes(data)
    e = read_end_to_end(p)
    _times_fit(e.summary.values(), "summary")
    for row in e.rows:
        _times_fit(vars(row).values() if hasattr(row, "__dict__") else tuple(row), "row")
    return "ok"


def run_fct(data: bytes, work: Path) -> str:
    from tokenpcap.export.hpcc_fct import read_fct

    p = work / "fct.txt"
    p.write_bytes(data)
    rows = read_fct(p)
    for name in ("start_ns", "fct_ns", "standalone_fct_ns", "size_bytes"):
        if rows.size and (rows[name] < 0).any():
            raise WrongOutput(f"fct.txt: a negative {name} was accepted")
    if rows.size and ((rows["src"] > 0xFFFF) | (rows["dst"] > 0xFFFF)).any():
        raise WrongOutput("fct.txt: a node id past 16 bits")
    return "ok"


def run_pfc(data: bytes, work: Path) -> str:
    from tokenpcap.export.hpcc_pfc import read_pfc

    p = work / "pfc.txt"
    p.write_bytes(data)
    read_pfc(p)
    return "ok"


def make_pfc(rng: random.Random, work: Path) -> bytes:
    """A ``pfc.txt`` as third.cc writes it (time ns, node, node_type, port, type), or the
    fixture's head, then mutated."""
    if rng.random() < 0.5:
        import gzip

        base = gzip.decompress((CASES / "hpcc" / "incast63x16m-pfc-pfc.txt.gz").read_bytes())
        base = base[:1 << 14]
    else:
        base = b"".join(b"%d %d %d %d %d\n" % (2_000_000_000 + 7 * i, rng.randrange(70),
                                                rng.randrange(2), rng.randrange(8),
                                                rng.randrange(2))
                        for i in range(rng.randint(1, 40)))
    return mutate_cells(base, rng, None)
