"""Independent test oracles: capture files spelled out by hand with ``struct`` from the specs
(draft-ietf-opsawg-pcap, draft-ietf-opsawg-pcapng, Endace ERF), a fill that copies given frames,
and runners for tshark / capinfos / tcpdump. Nothing here imports tokenpcap.pcap.formats, so a
mistake in our header declarations cannot hide in both the writer and its oracle."""
from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np

SHB_TYPE = 0x0A0D0D0A


def frames_fill(frames: list[bytes]):
    """A fill (the writers' batch contract, docs/pcap.md) that writes ``frames[i][:caplen[i]]`` at ``offsets[i]``."""
    def fill(out, offsets, caplen):
        assert len(offsets) == len(frames) == len(caplen)
        for f, o, c in zip(frames, offsets.tolist(), caplen.tolist()):
            out[o:o + c] = np.frombuffer(f[:c], np.uint8)
    return fill


def make_frames(lengths, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in lengths]


def pad4(b: bytes) -> bytes:
    return b + bytes(-len(b) % 4)


def hand_pcap(records, *, order="<", nsec=True, linktype=1, snaplen=262144) -> bytes:
    """records: (ts_sec, ts_frac, data, orig_len). File header §4, record header §5."""
    magic = 0xA1B23C4D if nsec else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for sec, frac, data, orig in records:
        out.append(struct.pack(order + "IIII", sec, frac, len(data), orig) + data)
    return b"".join(out)


def option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + pad4(value)


def block(order: str, btype: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


def shb(order: str, options: bytes = b"") -> bytes:
    return block(order, SHB_TYPE, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1) + options)


def idb(order: str, linktype: int = 1, snaplen: int = 0, *, tsresol=None, tsoffset=None,
        name=None) -> bytes:
    opts = b""
    if name is not None:
        opts += option(order, 2, name.encode())
    if tsresol is not None:
        opts += option(order, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += option(order, 14, struct.pack(order + "q", tsoffset))
    if opts:
        opts += struct.pack(order + "HH", 0, 0)
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + opts)


def epb(order: str, iface: int, ticks: int, data: bytes, orig_len: int | None = None,
        options: bytes = b"") -> bytes:
    body = struct.pack(order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(data),
                       len(data) if orig_len is None else orig_len)
    return block(order, 6, body + pad4(data) + options)


def comment_options(order: str, *texts: str, before: bytes = b"") -> bytes:
    return before + b"".join(option(order, 1, t.encode()) for t in texts) + struct.pack(order + "HH", 0, 0)


def erf_record(ts: int, etype: int, data: bytes, wlen: int, *, flags: int = 4,
               ext: list[bytes] = (), pad_to: int = 0) -> bytes:
    """Generic ERF header: ts LE u64, type, flags, rlen/lctr/wlen BE u16."""
    body = b"".join(ext) + (b"\x00\x00" if etype & 0x7F == 2 else b"") + data
    body += bytes(max(0, pad_to - 16 - len(body)))
    t = etype | (0x80 if ext else 0)
    return struct.pack("<QBB", ts, t, flags) + struct.pack(">HHH", 16 + len(body), 0, wlen) + body


def tshark_fields(path, *fields: str, extra: tuple[str, ...] = ()) -> list[list[str]]:
    cmd = ["tshark", "-r", str(path), "-T", "fields", *extra]
    for f in fields:
        cmd += ["-e", f]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.splitlines()]


def have(tool: str) -> bool:
    return shutil.which(tool) is not None
