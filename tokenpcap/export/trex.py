"""Our per-NIC captures as TRex stateless profiles (``tokenpcap export --to trex``).

TRex (Cisco, DPDK) replays at 400 Gb/s from a *stateless profile*: a Python file that
``from trex_stl_lib.api import *`` and whose ``register()`` returns an object with
``get_streams(...)`` giving ``STLStream`` s; a stream sends ``STLPktBuilder(pkt_buffer=bytes)``
in a mode such as ``STLTXSingleBurst(total_pkts, pps)``, ``isg`` microseconds (a float) after
the stream before it in a chain (``next`` = the following stream's name, ``self_start`` only on
the first), as TRex's own pcap loader chains packets (trex-core ``scripts/automation/
trex_control_plane/interactive/trex/stl/trex_stl_streams.py`` ``STLProfile.load_pcap``: one
single-packet burst per packet, ``isg`` = the time since the previous packet).

``-o PREFIX`` runs ``generate`` (classic pcap, the export's ``--scale``, one iteration, every
NIC, frames at the NIC's transmit side) into a hidden temporary directory and writes, per NIC
capture ``<nic>.pcap`` that ``generate`` writes:

* ``PREFIX_<nic>.py``: the profile: every frame of the capture, byte for byte (base64), one
  stream per frame in capture order, chained; each stream takes both MAC addresses from its
  frame (``mac_src_override_by_pkt=True``, ``mac_dst_override_mode=STLStreamDstMAC_PKT``: by
  default TRex's data path writes the port's MACs from its configuration over bytes 0-11,
  trex-core ``src/stx/stl/trex_stl_dp_core.cpp`` ``TrexStatelessDpCore::update_mac_addr``);
  ``isg`` = the gap since the previous frame's start
  in us written with its ns digits (``12.345``), so the sum of the gaps up to a frame is its time
  since the first frame exactly; each stream a single-packet burst at the NIC's packet rate for
  that frame (``link_gbps`` over its bits on the wire: frame + 4 FCS + 8 preamble + 12
  inter-frame gap bytes, IEEE 802.3 clause 4.4.2), so a message's frames, whose gaps are the
  wire time of the frame before, go out as a burst at line rate. The header comment lists what
  TRex does not reproduce.
* ``PREFIX_<nic>.timing.csv``: the timing manifest: per frame ``frame, t_ns`` (our schedule's
  time since the capture's first frame), ``capture_ns`` (its timestamp in the capture, which
  sets the NICs' profiles beside each other), ``gap_ns``, ``isg_us`` (as written), ``frame_bytes``,
  ``message`` (messages numbered per NIC: a RoCEv2 FIRST or ONLY opcode opens one on its
  destination QP, MIDDLE and LAST frames belong to the QP's open message, ACKs, CNPs and
  non-RoCE frames are one each), ``dest_qp``, ``opcode``, ``psn`` (-1: not RoCEv2), so a capture
  of the replay can be scored per message.

The profile's name has no dot before ``.py``: TRex imports a Python profile as the module named
by its file name up to the first dot (``STLProfile.load_py`` in ``trex_stl_streams.py``), so a
``PREFIX`` or NIC name with a dot is refused with one line.

Bound: a NIC with more than :data:`MAX_STREAMS` frames is refused with one line (TRex keeps a
profile's streams in memory, one per frame here; use ``--scale`` or a smaller scenario); from
``generate``'s prediction, before any frame is written, when the frames average more than that
per NIC, else once the NIC's capture is written.
"""
from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.export.registry import atomic_text, register_export

__all__ = ["MAX_STREAMS", "ROCEV2_PORT", "frame_fields", "write_trex"]

#: Frames (streams) per NIC profile at most (TRex documents "up to 10K streams" per profile).
MAX_STREAMS = 10_000
#: RoCEv2's UDP destination port (IBTA RoCEv2 Annex A17.2.3).
ROCEV2_PORT = 4791
_WIRE_OVERHEAD_BYTES = 4 + 8 + 12      # FCS, preamble + SFD, inter-frame gap (802.3 4.4.2)
_FIRST_OR_ONLY = {0x00, 0x04, 0x05, 0x06, 0x0A, 0x0B}   # RC SEND/WRITE FIRST, ONLY(+IMM) (IBTA 9.2)
_MIDDLE_OR_LAST = {0x01, 0x02, 0x03, 0x07, 0x08, 0x09}

_HEADER = '''"""TRex stateless profile of NIC {nic}: {n} frames over {span_ns} ns (tokenpcap export --to trex).

Frames: exactly the bytes of the capture {nic}.pcap that tokenpcap generate writes for the
same scenario and --scale; ICRC and every other field are whatever those frames carry (TRex's
Field Engine cannot recompute a RoCEv2 ICRC, so nothing here rewrites a byte). Both MAC
addresses come from the frame (mac_src_override_by_pkt, mac_dst_override_mode below); drop
those two arguments to have TRex write its ports' MACs from trex_cfg.yaml instead.
Timing: one single-packet burst per frame, chained, isg = the gap since the previous frame in
microseconds with its nanosecond digits; the manifest {nic}.timing.csv beside this file holds
each frame's time in ns.
What TRex does not reproduce:
  * nanosecond gaps: TRex schedules streams with about a microsecond of resolution, so gaps
    below that (the back-to-back frames of one message, {sub_us} of {n} gaps here) become
    "as soon as possible", and every frame's start may be off by up to a few microseconds;
  * the exact interleaving of QPs beyond the order of this one chain: a chained stream waits
    for the one before it, so frames that overlapped on our NIC go out one after another;
  * line rate per frame: a single-packet burst at {gbps} Gb/s is TRex's rate limit, not a
    guarantee; at 400 Gb/s TRex sustains far fewer chained streams per second than frames.
Run: trex-console, then: start -f {name} -p 0
"""
from trex_stl_lib.api import *  # noqa: F401,F403  (STLStream, STLPktBuilder, STLTXSingleBurst,
#                                                     STLStreamDstMAC_PKT)
import base64

'''

_BODY = '''

class Profile(object):
    """The frames of NIC {nic} as a chain of single-packet bursts."""

    def get_streams(self, *args, **kwargs):
        streams = []
        for i, (frame, isg_us, pps) in enumerate(zip(FRAMES, ISG_US, PPS)):
            last = i + 1 == len(FRAMES)
            streams.append(STLStream(
                name="f%d" % i,
                packet=STLPktBuilder(pkt_buffer=base64.b64decode(frame)),
                mode=STLTXSingleBurst(total_pkts=1, pps=pps),
                isg=isg_us,
                self_start=(i == 0),
                next=None if last else "f%d" % (i + 1),
                mac_src_override_by_pkt=True,
                mac_dst_override_mode=STLStreamDstMAC_PKT))
        return streams


def register():
    return Profile()
'''


def frame_fields(frame: bytes) -> tuple[int, int, int]:
    """``(opcode, dest_qp, psn)`` of a RoCEv2 frame (Ethernet, optional 802.1Q tags, IPv4 or
    IPv6, UDP to :data:`ROCEV2_PORT`, BTH: opcode byte 0, DestQP bytes 5-7, PSN bytes 9-11,
    IBTA vol. 1 9.2); ``(-1, -1, -1)`` for any other frame."""
    o, etype = 14, int.from_bytes(frame[12:14], "big")
    while etype in (0x8100, 0x88A8) and len(frame) >= o + 4:
        etype, o = int.from_bytes(frame[o + 2:o + 4], "big"), o + 4
    if etype == 0x0800 and len(frame) > o:
        proto, o = frame[o + 9], o + (frame[o] & 0x0F) * 4
    elif etype == 0x86DD:
        proto, o = frame[o + 6] if len(frame) > o + 6 else -1, o + 40
    else:
        return -1, -1, -1
    if proto != 17 or len(frame) < o + 20 or \
            int.from_bytes(frame[o + 2:o + 4], "big") != ROCEV2_PORT:
        return -1, -1, -1
    b = frame[o + 8:o + 20]
    return b[0], int.from_bytes(b[5:8], "big"), int.from_bytes(b[9:12], "big")


def _nic_files(frames: list[bytes], times_ns: np.ndarray, nic: str, gbps: float, name: str
               ) -> tuple[str, list[str]]:
    """(profile source, manifest lines) of one NIC's frames."""
    t = times_ns - times_ns[0]
    gaps = np.diff(t, prepend=t[0]).tolist()
    isg = [f"{g // 1000}.{g % 1000:03d}" for g in gaps]
    pps = [gbps * 1e9 / ((len(f) + _WIRE_OVERHEAD_BYTES) * 8) for f in frames]
    open_msg, n_msg = {}, 0
    lines = ["frame,t_ns,capture_ns,gap_ns,isg_us,frame_bytes,message,dest_qp,opcode,psn\n"]
    for i, f in enumerate(frames):
        op, qp, psn = frame_fields(f)
        if op in _MIDDLE_OR_LAST and qp in open_msg:
            msg = open_msg[qp]
        else:
            msg, n_msg = n_msg, n_msg + 1
            if op in _FIRST_OR_ONLY:
                open_msg[qp] = msg
        lines.append(f"{i},{int(t[i])},{int(times_ns[i])},{gaps[i]},{isg[i]},{len(f)},{msg},{qp},{op},{psn}\n")
    src = _HEADER.format(nic=nic, n=len(frames), span_ns=int(t[-1]), gbps=f"{gbps:g}",
                         sub_us=sum(1 for g in gaps[1:] if g < 1000), name=name)
    src += "FRAMES = (\n" + "".join(
        f"    {base64.b64encode(f).decode('ascii')!r},\n" for f in frames) + ")\n"
    src += "ISG_US = (" + ", ".join(isg) + ",)\n"
    src += "PPS = (" + ", ".join(repr(p) for p in pps) + ",)\n"
    return src + _BODY.format(nic=nic), lines


def write_trex(plan, out: str | Path,  # type: ignore[no-untyped-def]
               nics: frozenset[int] | None = None) -> list[Path]:
    """Write the profiles and manifests of ``plan`` at prefix ``out`` (module docstring);
    ``nics``: only those NICs' (global index node * nics_per_node + NIC, as ``generate
    --nics``; their frames and times are those of the full run), every NIC when None.

    Raises:
        InputError: a NIC sends more than :data:`MAX_STREAMS` frames; the prefix or a NIC name
            has a dot (TRex's loader, module docstring); as ``generate``.
        OutputError: a file cannot be written.
    """
    from tokenpcap.generate.options import GenerateOptions
    from tokenpcap.generate.run import generate
    from tokenpcap.generate.select import Selection
    from tokenpcap.pcap.reader import open_capture

    out = Path(out)
    if "." in out.name:
        raise InputError(f"export --to trex: output prefix {out.name!r} has a dot; TRex imports "
                         "a profile by its file name up to the first dot: use a prefix without")
    gbps = float(plan.scenario.cluster.link_gbps)
    written = []

    def refuse_before_writing(expected: dict) -> None:
        """``generate``'s prediction, before a frame is written: more frames than
        :data:`MAX_STREAMS` per file on average means one NIC at least has too many, so the
        run is refused now rather than after writing every NIC's capture."""
        files, packets = expected["files"], expected["packets"]
        if packets > MAX_STREAMS * files:
            raise InputError(f"export --to trex: {packets:,} frames over {files:,} NICs, "
                             f"expected at most {MAX_STREAMS:,} per NIC (one TRex stream "
                             "each; some NIC sends more); use --scale")

    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".trex-") as tmp:
        res = generate(plan.scenario, GenerateOptions(out_dir=Path(tmp), fmt="pcap",
                                                      scale=plan.scale, iterations=1,
                                                      selection=Selection(nics=nics)),
                       announce=refuse_before_writing)
        for path, packets, _ in sorted(res.files, key=lambda f: str(f[0])):
            nic = Path(path).stem
            if packets > MAX_STREAMS:
                raise InputError(f"export --to trex: NIC {nic} sends {packets:,} frames, "
                                 f"expected at most {MAX_STREAMS:,} (one TRex stream each); "
                                 "use --scale")
            if packets == 0:
                continue
            with open_capture(path) as cap:
                rec = cap.read()
                frames = [cap.frame(r) for r in rec]
                times = rec["time_ns"].astype(np.int64)
            name = f"{out.name}_{nic}.py"
            if "." in name[:-len(".py")]:
                raise InputError(f"export --to trex: profile name {name!r} has a dot before .py; "
                                 "TRex imports a profile by its name up to the first dot: "
                                 "use an output prefix without dots")
            src, lines = _nic_files(frames, times, nic, gbps, name)
            prof, man = out.with_name(name), out.with_name(f"{out.name}_{nic}.timing.csv")
            atomic_text(prof, [src])
            atomic_text(man, lines)
            written += [prof, man]
    return written


@register_export("trex", "TRex stateless profile and timing manifest per NIC (runs generate)",
                 plan_only=True)
def _export(plan, out: Path) -> list[Path]:  # type: ignore[no-untyped-def]
    return write_trex(plan, out)
