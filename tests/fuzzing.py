"""Fuzzing shared by tests/test_fuzz.py (Hypothesis, seconds) and benchmarks/fuzz_campaign.py
(a long campaign): seed inputs, mutations, and the targets with their outcome rules.

Seeds are captures the project writes (pcap, pcapng with comments, cut by a snaplen, IPv6,
native InfiniBand in ERF, in pcap linktype 197 and in pcapng) and foreign ones spelled out from
the specs (big-endian and microsecond pcap, pcapng in both byte orders with several interfaces
and if_tsresol values, Simple and obsolete Packet Blocks, several sections, Ethernet ERF), plus
the repository's YAML profiles for the profile loader.

A target runs one input and returns ``"ok"`` or ``"error"`` (a :class:`TokenpcapError`: one
clean line); anything else raised is a crash, and so is a successful readdress whose output is
not a readable capture of as many packets (a wrong file with exit 0).
"""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import numpy as np

from tests.analysis.trace import write_trace
from tests.pcap.helpers import block, epb, erf_record, hand_pcap, idb, option, pad4, shb

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("read", "readdress", "plot", "views", "draw", "inspect", "profile", "mapping")

_INTERESTING_32 = (0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF,
                   0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 16, 24, 28, 32, 0x0A0D0D0A, 0x1A2B3C4D)


def _frames(tmp: Path) -> list[bytes]:
    from tokenpcap.pcap.reader import open_capture

    write_trace(tmp / "frames.pcap", 6, qps=2)
    cap = open_capture(tmp / "frames.pcap")
    return [bytes(cap.frame(r)) for r in cap.read()]


def capture_seeds(tmp: Path) -> dict[str, bytes]:
    """name -> bytes of every seed capture (module docstring); ``tmp`` holds scratch files."""
    import json

    from tokenpcap.pcap import ErfWriter, Interface, PcapngWriter, PcapWriter

    tmp.mkdir(parents=True, exist_ok=True)
    seeds: dict[str, bytes] = {}
    labels = ["dp/backward/AllReduce step 0", "pp/forward/Send mb 1", "cts dp/backward",
              "ack"] * 2
    for name, kw in (("ours.pcap", {}), ("ours.pcapng", {"fmt": "pcapng", "comments": labels}),
                     ("ours-cut64.pcapng", {"fmt": "pcapng", "snaplen": 64}),
                     ("ours-ipv6.pcap", {"ip_version": 6})):
        write_trace(tmp / name, 8, qps=2, **kw)
        seeds[name] = (tmp / name).read_bytes()
    hw = json.loads((ROOT / "tests" / "cases" / "hw-frames.json").read_text())
    ib = [bytes.fromhex(x["hex"]) for x in hw["native_ib"]]
    t = 1_704_067_200 * 10**9 + np.arange(len(ib), dtype=np.int64) * 1000
    lens = np.array([len(f) for f in ib], np.int64)

    def fill(out, off, cl):
        for f, o, c in zip(ib, off.tolist(), cl.tolist()):
            out[o:o + c] = np.frombuffer(f[:c], np.uint8)

    for name, make in (("ib.erf", lambda p: ErfWriter(p)),
                       ("ib.pcap", lambda p: PcapWriter(p, link="infiniband")),
                       ("ib.pcapng", lambda p: PcapngWriter(p, [Interface("ib0", link="infiniband")]))):
        with make(tmp / name) as w:
            w.write_batch(t, lens, fill)
        seeds[name] = (tmp / name).read_bytes()
    fr = _frames(tmp)
    seeds["be-usec.pcap"] = hand_pcap([(1_700_000_000, i * 10, f, len(f)) for i, f in
                                       enumerate(fr)], order=">", nsec=False)
    seeds["cut.pcap"] = hand_pcap([(1_700_000_000, i, f[:40], len(f)) for i, f in enumerate(fr)],
                                  snaplen=40)
    for order in "<>":
        body = [shb(order, option(order, 1, b"foreign section") + struct.pack(order + "HH", 0, 0)),
                idb(order, 1, 0, tsresol=6, name="eth0"), idb(order, 1, 128, tsresol=0x80 | 20),
                idb(order, 1, 0, tsresol=9, tsoffset=1_700_000_000)]
        for i, f in enumerate(fr):
            body.append(epb(order, i % 3, (1 << 40) + i * 977, f,
                            options=option(order, 1, f"pkt {i}".encode()) +
                            struct.pack(order + "HH", 0, 0)))
        body.append(block(order, 3, struct.pack(order + "I", len(fr[0])) + pad4(fr[0])))   # SPB
        body.append(block(order, 2, struct.pack(order + "HHIII", 0, 0, 1, 5, len(fr[1])) +
                          struct.pack(order + "I", len(fr[1])) + pad4(fr[1])))          # OPB
        body += [shb(order), idb(order, 1, 0), epb(order, 0, 5, fr[2])]               # section 2
        seeds[f"foreign-{'le' if order == '<' else 'be'}.pcapng"] = b"".join(body)
    seeds["eth.erf"] = b"".join(erf_record((1_700_000_000 << 32) + (i << 24), 2, f, len(f) + 4)
                                for i, f in enumerate(fr))
    return seeds


def profile_seeds() -> dict[str, bytes]:
    """name -> bytes of a self-contained scenario (model and cluster inline) and the shipped
    model and cluster profiles."""
    import yaml

    prof = ROOT / "profiles"
    model = yaml.safe_load((prof / "models" / "gpt2-small.yaml").read_text())
    cluster = yaml.safe_load((prof / "clusters" / "h100-rocev2-8x1.yaml").read_text())
    scen = {"name": "fuzz", "corpus": "corpus.txt", "tokenizer": {"kind": "utf8"},
            "model": model, "cluster": cluster,
            "parallelism": {"dp": 2, "tp": 2, "pp": 2, "sequence_parallel": True},
            "training": {"micro_batch_size": 1, "global_batch_size": 8},
            "collectives": {"algorithm": "ring", "channels": 2},
            "generation": {"seed": 7, "iterations": 1}}
    seeds = {"scenario.yaml": yaml.safe_dump(scen, sort_keys=False).encode()}
    for p in sorted((prof / "models").glob("*.yaml"))[:3] + sorted((prof / "clusters").glob("*.yaml")):
        seeds[p.name] = p.read_bytes()
    return seeds


def mapping_seeds() -> dict[str, bytes]:
    """name -> bytes of readdress mapping files: docs/analysis.md's lab.yaml and one with every
    key."""
    import re

    text = (ROOT / "docs" / "analysis.md").read_text(encoding="utf-8")
    lab = re.search(r"```yaml\n# lab.yaml\n(.*?)```", text, re.S).group(1)
    every = ("addresses:\n  198.18.0.1: 10.10.1.1\n  \"02:00:00:00:00:00\": \"b8:ce:f6:12:34:00\"\n"
             "  fd00::1: fd99::1\nvlan: 100\npcp: 3\ndscp: 26\necn: 2\nttl: 64\n"
             "udp_sport: {0xC000: 0xD000}\nudp_sport_offset: 4096\n")
    return {"lab.yaml": lab.encode(), "every.yaml": every.encode()}


def mutate(data: bytes, rng: random.Random, other: bytes | None = None, rounds: int = 0) -> bytes:
    """Apply 1-4 random mutations: bit flips, interesting bytes and 32-bit words (both byte
    orders; lengths and magics), truncation, insertion, deletion, duplication of a chunk, a
    splice with ``other``. Deterministic in ``rng``."""
    b = bytearray(data)
    for _ in range(rounds or rng.randint(1, 4)):
        n = len(b)
        op = rng.randrange(9)
        at = rng.randrange(n + 1) if n else 0
        if op == 0 and n:
            b[min(at, n - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            b[min(at, n - 1)] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2 and n >= 4:
            at = min(at, n - 4) & ~(rng.choice((0, 3)))
            v = rng.choice(_INTERESTING_32 + (n, n - at, rng.randrange(1 << 32)))
            v = (v + rng.choice((0, 0, 1, -1, 4, -4))) & 0xFFFFFFFF
            b[at:at + 4] = struct.pack(rng.choice("<>") + "I", v)
        elif op == 3:
            del b[at:]
        elif op == 4:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 2, 4, 8, 16))))
        elif op == 5 and n:
            del b[at:at + rng.choice((1, 4, 16, 64))]
        elif op == 6 and n:
            k = rng.choice((4, 16, 64, 256))
            b[at:at] = b[at:at + k] * rng.choice((1, 2, 8))
        elif op == 7 and other:
            cut = rng.randrange(len(other) + 1)
            b = b[:at] + bytearray(other[cut:cut + rng.choice((16, 64, 1024, 1 << 20))])
        elif op == 8 and n >= 2:
            b[min(at, n - 2):min(at, n - 2) + 2] = struct.pack(
                rng.choice("<>") + "H", rng.choice((0, 1, 0xFFFF, 0x8000, rng.randrange(1 << 16))))
    return bytes(b)


def mutate_text(data: bytes, rng: random.Random) -> bytes:
    """YAML-aware mutations: replace a value by a hostile one, or fall back to :func:`mutate`."""
    lines = data.decode("utf-8", "replace").splitlines()
    hostile = ("-1", "0", "1e400", ".nan", "null", "[]", "{}", "'a\\0b'", "\"\\0\"", "*x",
               "&x [*x]", "99999999999999999999999", "true", "'../../../etc/passwd'", "~",
               "!!python/object:os.system ''", "<<: {a: 1}", "\t", "'" + "x" * 300 + "'")
    if lines and rng.random() < 0.6:
        i = rng.randrange(len(lines))
        head, sep, _ = lines[i].partition(":")
        lines[i] = head + (sep or ":") + " " + rng.choice(hostile)
        if rng.random() < 0.2:
            lines.insert(rng.randrange(len(lines) + 1), lines[i])       # a duplicate key
        return ("\n".join(lines) + "\n").encode()
    return mutate(data, rng)


def run_target(target: str, data: bytes, work: Path) -> str:
    """Run ``target`` on ``data`` (module docstring). Returns ``"ok"`` or ``"error"``; raises
    whatever a crash raises (:class:`WrongOutput` for a bad readdress output)."""
    from tokenpcap.errors import TokenpcapError

    try:
        return _run(target, data, work)
    except TokenpcapError as err:
        text = str(err)
        if "\n" in text or not text:
            raise WrongOutput(f"error message of {len(text.splitlines())} lines: {text[:200]!r}")
        return "error"


class WrongOutput(AssertionError):
    """A target finished without error but its result breaks the rules (module docstring)."""


def _run(target: str, data: bytes, work: Path) -> str:
    from tokenpcap.errors import TokenpcapError

    if target == "mapping":
        from tokenpcap.analysis.readdress_mapping import load_mapping

        p = work / "mapping.yaml"
        p.write_bytes(data)
        load_mapping(p)
        return "ok"
    if target == "profile":
        from tokenpcap.config.profiles import load_cluster, load_model, load_scenario

        (work / "corpus.txt").write_text("nel mezzo del cammin", encoding="utf-8")
        p = work / "profile.yaml"
        p.write_bytes(data)
        load = (load_scenario if b"parallelism" in data else
                load_model if b"hidden_size" in data else load_cluster)
        load(p)
        return "ok"
    src = work / "in.cap"
    src.write_bytes(data)
    if target == "read":
        from tokenpcap.analysis.decode import decode_batch
        from tokenpcap.pcap.reader import open_capture

        cap = open_capture(src, on_truncation="stop")
        for rec in cap.batches(4096):
            end = rec["offset"].astype(np.int64) + rec["caplen"].astype(np.int64)
            if rec.size and (int(rec["offset"].min()) < 0 or int(end.max()) > cap.size):
                raise WrongOutput(f"a record outside the file: offsets {rec['offset'][:4]}")
            decode_batch(cap.data, rec, cap.views)
        return "ok"
    if target == "inspect":
        from tokenpcap.analysis.inspect import inspect_captures
        from tokenpcap.analysis.report import render_text

        rep = inspect_captures([src])
        render_text(rep)
        json.dumps(rep.to_json())
        return "ok"
    if target == "draw":
        from tokenpcap.analysis.plot import plot_all

        pics = work / "pics"
        drawn = plot_all(src, pics)
        if [p.name for p in drawn] != ["in-throughput.png", "in-sizes.png"] or any(
                p.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n" for p in drawn):
            raise WrongOutput(f"plot drew {[p.name for p in drawn]}, expected two PNGs")
        for p in drawn:
            p.unlink()
        return "ok"
    if target == "plot":
        from tokenpcap.analysis.plot import capture_series

        s = capture_series(src, bins=16)
        if any(v.size != s["bins"] for v in s["throughput"].values()):
            raise WrongOutput("a throughput row of the wrong length")
        return "ok"
    if target == "views":
        from tokenpcap.analysis.plot_fanin import fan_in_series
        from tokenpcap.analysis.plot_heatmap import heatmap_series

        h, f = heatmap_series([src], bins=16), fan_in_series([src], bins=16)
        if h["bytes"].shape != (len(h["nics"]), h["bins"]) or f["fan_in"].shape != (
                len(f["receivers"]), f["bins"]) or (f["fan_in"] < 0).any():
            raise WrongOutput("a heat map or fan-in matrix of the wrong shape")
        if (h["family_bytes"].sum(axis=1) != h["bytes"].sum(axis=1)).any():
            raise WrongOutput("the heat map's families do not add up to its rows")
        return "ok"
    if target == "readdress":
        from tokenpcap.analysis.readdress import Mapping, readdress
        from tokenpcap.pcap.reader import open_capture

        m = Mapping(vlan=[None, 100, -1][len(data) % 3], dscp=26)
        m.add_address("198.18.0.1", "10.0.0.1")
        out = work / ("out.pcapng" if len(data) % 2 else "out.pcap")
        try:
            stats = readdress(src, out, m)
        except BaseException:
            if out.exists():
                raise WrongOutput("an output file was left by a failed readdress") from None
            raise
        try:
            got = sum(r.size for r in open_capture(out).batches())
        except TokenpcapError as err:
            raise WrongOutput(f"readdress exited cleanly but its output is unreadable: {err}"
                              ) from None
        finally:
            out.unlink(missing_ok=True)
        if got != stats["packets"]:
            raise WrongOutput(f"readdress wrote {got} records, said {stats['packets']}")
        return "ok"
    raise ValueError(f"target: got {target!r}, expected one of {TARGETS}")
