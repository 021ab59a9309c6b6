"""pcapng reading (draft-ietf-opsawg-pcapng): sections of either byte order, interfaces with
their own ``if_tsresol``/``if_tsoffset``, EPB/SPB/obsolete PB packets and EPB comments, vectorized.

Each section's byte order comes from its own SHB byte-order magic, never from the host (case C11).
Blocks are found with :func:`tokenpcap.pcap.chain.walk` (the walk stops at the next SHB); IDBs
are decoded one by one (there are few), packet blocks all at once with numpy. Unknown block types
(NRB, ISB, DSB, custom ...) are skipped as the specification asks (§3.1).
"""
from __future__ import annotations

import struct
from bisect import bisect_left

import numpy as np

from tokenpcap.errors import CaptureError, TruncatedFile
from tokenpcap.pcap.chain import Chain
from tokenpcap.pcap.formats import (
    BT_EPB, BT_IDB, BT_OPB, BT_SHB, BT_SPB, BYTE_ORDER_MAGIC, EPB, IDB, IDB_OPTIONS, LINKTYPE_ERF,
    SHB, SHB_OPTIONS, SPB, decode_options, pad4)
from tokenpcap.pcap.capture import (
    RECORD_DTYPE, Capture, InterfaceInfo, columns_at, even_step, located_error)
from tokenpcap.pcap.comments import comment_spans, distinct_texts
from tokenpcap.pcap.erf import unwrap_erf
from tokenpcap.pcap.timestamps import NO_TIME, tsresol_to_ns

__all__ = ["PcapngCapture"]

_KNOWN = np.array([BT_SHB, BT_IDB, BT_OPB, BT_SPB, 4, 5, BT_EPB, 0xA, 0xBAD, 0x40000BAD],
                  np.uint32)


class _BlockChain(Chain):
    header = 12
    align = 4

    def __init__(self, data, raw, end, order, name):
        super().__init__(data, end, name)
        self.raw = raw
        self.u4 = self.views(order + "u4")
        self.struct = struct.Struct(order + "II")
        self.last = max(end - 8, 0)
        self.len_view = np.ndarray((self.last + 1,), order + "u4", buffer=data, offset=4,
                                   strides=(1,)) if end >= 8 else np.zeros(1, np.uint32)

    def advance(self, cur, out, at=None):
        np.add(cur, self.len_view[cur if at is None else at], out=out)

    def bad(self, pos, at=None):
        at = pos if at is None else at
        length = self.len_view[at]
        return (length < 12) | ((length & 3) != 0) | (self.u4[at] == BT_SHB)

    def step(self, pos):
        inb = pos + self.header <= self.end
        safe = np.where(inb, pos, 0)
        length = self.u4[safe + 4].astype(np.int64)
        nxt = pos + length
        stop = inb & (self.u4[safe] == BT_SHB)
        ok = inb & (length >= 12) & (length % 4 == 0) & (nxt <= self.end)
        return nxt, ok, stop

    def plausible(self, pos):
        length = self.u4[pos + 4].astype(np.int64)
        good = (length >= 12) & (length % 4 == 0) & (pos + length <= self.end)
        good &= np.isin(self.u4[pos], _KNOWN)
        tail = np.where(good, pos + length - 4, pos + 4)
        return good & (self.u4[tail] == length)

    def scalar(self, p, limit, max_count):
        out, unpack, end, raw, n = [], self.struct.unpack_from, self.end, self.raw, max_count
        append, last = out.append, self.end - 12
        while p < limit and n:
            if p > last:
                raise self.truncated(p, 12, "pcapng block header")
            btype, length = unpack(raw, p)
            q = p + length
            if btype == BT_SHB or q > end or length < 12 or length & 3:
                if btype == BT_SHB:
                    return out, p, True
                if length < 12 or length & 3:
                    raise self.corrupt(p, f"pcapng block_length: got {length}, expected a "
                                          "multiple of 4 >= 12")
                raise self.truncated(p, length, "pcapng block")
            append(p)
            p = q
            n -= 1
        return out, p, False


class PcapngCapture(Capture):
    """A pcapng file; ``sections`` holds each SHB's byte order and options."""

    format = "pcapng"

    def __init__(self, path, data, raw, on_truncation, comments: bool = True):
        super().__init__(path, data, on_truncation)
        self.raw = raw
        self.sections: list[dict] = []
        self._section_at: dict[int, int] = {}     # SHB offset -> index in sections
        self._want_comments = comments
        self._read_shb(0)      # fail early on a bad first section

    def _read_shb(self, p: int) -> tuple[str, int, int]:
        """Parse the SHB at ``p``: (byte order, block length, section index). Records the
        section once: a second walk over the file (``batches()`` again) finds it by offset."""
        name = str(self.path)
        if p + 12 > self.size:
            raise located_error(TruncatedFile, p,
                         f"{name}: pcapng Section Header Block: got {self.size - p} bytes, expected >= 28")
        magic = int(self.views("<u4")[p + 8])
        if magic == BYTE_ORDER_MAGIC:
            order = "<"
        elif magic == int.from_bytes(BYTE_ORDER_MAGIC.to_bytes(4, "little"), "big"):
            order = ">"
        else:
            raise located_error(CaptureError, p + 8, f"{name}: pcapng byte-order magic: got 0x{magic:08x}, "
                         "expected 1a2b3c4d in either byte order")
        length = int(self.views(order + "u4")[p + 4])
        if length < 28 or length % 4:
            raise located_error(CaptureError, p, f"{name}: pcapng SHB block_length: got {length}, "
                         "expected a multiple of 4 >= 28")
        if p + length > self.size:
            raise located_error(TruncatedFile, p, f"{name}: pcapng SHB: needs {length} bytes, got {self.size - p}")
        if int(self.views(order + "u4")[p + length - 4]) != length:
            raise located_error(CaptureError, p, f"{name}: pcapng SHB trailing block_length differs from {length}")
        h = SHB.unpack(self.data, p, order)
        if h["major"] != 1:
            raise located_error(CaptureError, p + 12, f"{name}: pcapng major version: got {h['major']}, expected 1")
        section = self._section_at.get(p)
        if section is None:
            opts = decode_options(self.raw, p + SHB.size, p + length - 4, SHB_OPTIONS, order)
            section = self._section_at[p] = len(self.sections)
            self.sections.append({"offset": p, "byte_order": order, "options": opts,
                                  "first_interface": len(self.interfaces), "idbs": []})
        return order, length, section

    def _regions(self):
        p = 0
        while p < self.size:
            try:
                order, length, section = self._read_shb(p)
            except TruncatedFile as err:
                if not self._stop_on_truncation or p == 0:
                    raise
                self.truncated_at = err.offset
                return
            chain = _BlockChain(self.data, self.raw, self.size, order, str(self.path))
            p += length
            for starts, p, _ in self._walk(chain, p, self.size):
                yield starts, (order, section)
            if self.truncated_at is not None:
                return

    def _idb(self, p: int, length: int, order: str, section: int) -> None:
        """Decode the IDB at ``p`` into :attr:`interfaces`, once: a second walk over the
        file finds the section's IDBs already there (sections are walked in file order, so
        the interfaces of one section stay contiguous from its ``first_interface``)."""
        idbs = self.sections[section]["idbs"]
        if idbs and p <= idbs[-1]:
            return
        if length < IDB.size + 4:
            raise located_error(CaptureError, p, f"{self.path}: pcapng IDB block_length: got {length}, "
                         f"expected >= {IDB.size + 4}")
        h = IDB.unpack(self.data, p, order)
        o = decode_options(self.raw, p + IDB.size, p + length - 4, IDB_OPTIONS, order)
        self.interfaces.append(InterfaceInfo(
            len(self.interfaces), h["linktype"], h["snaplen"], o.get("if_name"),
            o.get("if_description"), o.get("if_speed"), int(o.get("if_tsresol", 6)),
            int(o.get("if_tsoffset", 0)), section, order))
        idbs.append(p)

    def _section_interfaces(self, section: int) -> list[InterfaceInfo]:
        """The interfaces of one section decoded so far, in IDB order (its own slice of
        :attr:`interfaces`: what a section costs does not grow with the sections before it)."""
        sec = self.sections[section]
        first = sec["first_interface"]
        return self.interfaces[first:first + len(sec["idbs"])]

    def _decode(self, starts: np.ndarray, ctx: tuple[str, int]) -> np.ndarray:
        order, section = ctx
        u4 = self.views(order + "u4")
        head = None
        step = even_step(starts)
        if starts.size and int(starts[-1]) + EPB.size <= self.size:
            # whole EPB-sized headers: by column over the file when the blocks are of one size
            head = columns_at(self.data, starts, EPB.dtype(order), self.views, step)
            btype, length = head["block_type"], head["block_length"].astype(np.int64)
        else:
            btype, length = u4[starts], u4[starts + 4].astype(np.int64)
        if step and int(starts[-1]) + step <= self.size and not np.any(length != step):
            trail = np.ndarray((starts.size,), order + "u4", buffer=self.data,
                               offset=int(starts[0]) + step - 4, strides=(step,))
        else:
            trail = u4[starts + length - 4]
        bad = trail != length
        if bad.any():
            p = int(starts[np.flatnonzero(bad)[0]])
            raise located_error(CaptureError, p, f"{self.path}: pcapng trailing block_length differs "
                         f"from the leading one ({int(u4[p + 4])})")
        # the section's interfaces described before this batch (on a second walk the later
        # ones are known too, and must not count)
        before = bisect_left(self.sections[section]["idbs"], int(starts[0])) if starts.size \
            else 0
        is_idb = btype == BT_IDB
        if is_idb.any():
            defined = np.cumsum(is_idb) + before
            for i in np.flatnonzero(is_idb):
                self._idb(int(starts[i]), int(length[i]), order, section)
        else:
            defined = before
        is_epb = btype == BT_EPB
        if is_epb.all() and head is not None:               # the usual case: only EPBs
            rec = self._packets(starts, length, np.zeros(starts.size, bool), defined, section,
                                order, head=head)
        else:
            pk = np.flatnonzero(is_epb | (btype == BT_OPB) | (btype == BT_SPB))
            rec = self._packets(starts[pk], length[pk], btype[pk] == BT_SPB,
                                defined if np.isscalar(defined) else defined[pk], section,
                                order, opb=btype[pk] == BT_OPB)
        erf = np.flatnonzero(rec["linktype"] == LINKTYPE_ERF)
        if erf.size:
            sub = rec[erf]
            keep = unwrap_erf(self.views, sub, self.path)
            rec[erf] = sub
            if not keep.all():
                drop = np.ones(rec.size, bool)
                drop[erf[~keep]] = False
                rec = rec[drop]
        return rec

    def _packets(self, pos, blen, spb, defined, section, order, *, head=None, opb=None):
        """RECORD rows for EPB/OPB/SPB blocks at ``pos`` of section ``section`` (``spb``/``opb``
        mark the kinds; ``head``: the EPB headers already gathered when every block is an EPB)."""
        all_epb = head is not None
        first = self.sections[section]["first_interface"]
        own = self._section_interfaces(section)
        u4, u2 = self.views(order + "u4"), self.views(order + "u2")
        n = pos.size
        rec = np.empty(n, RECORD_DTYPE)
        if n == 0:
            return rec
        hdr = EPB.size if all_epb else np.where(spb, SPB.size, EPB.size)
        short = blen < (EPB.size + 4 if all_epb else np.where(spb, SPB.size + 4, EPB.size + 4))
        if short.any():
            i = int(np.flatnonzero(short)[0])
            raise located_error(CaptureError, int(pos[i]), f"{self.path}: pcapng packet block_length: "
                         f"got {int(blen[i])}, expected >= {EPB.size + 4}")
        if all_epb:
            ifid = head["interface_id"].astype(np.int64)
            cap = head["caplen"].astype(np.int64)
            orig = head["orig_len"]
            ticks = (head["ts_high"].astype(np.uint64) << np.uint64(32)) | head["ts_low"]
        else:
            safe = np.where(spb, pos, pos + 8)               # no reads past an SPB's 16 bytes
            ifid = np.where(opb, u2[safe], u4[safe]).astype(np.int64)
            ifid[spb] = 0
            cap = u4[np.where(spb, pos, pos + EPB.offset("caplen"))].astype(np.int64)
            orig = u4[pos + np.where(spb, SPB.offset("orig_len"), EPB.offset("orig_len"))]
            ticks = (u4[pos + 12].astype(np.uint64) << np.uint64(32)) | u4[pos + 16]
        undefined = ifid >= defined
        if undefined.any():
            i = int(np.flatnonzero(undefined)[0])
            got = defined if np.isscalar(defined) else int(defined[i])
            raise located_error(CaptureError, int(pos[i]), f"{self.path}: pcapng packet block: "
                         f"interface_id got {int(ifid[i])}, expected < {got} "
                         "(interfaces described before it in this section)")
        glob = ifid + first
        if not all_epb and spb.any():
            snap = np.array([itf.snaplen for itf in own], np.int64)[ifid]
            cap = np.where(spb, np.minimum(np.minimum(orig, np.where(snap > 0, snap, orig)),
                                           blen - hdr - 4), cap)
        over = pad4(cap) + hdr + 4 > blen
        if over.any():
            i = int(np.flatnonzero(over)[0])
            h = hdr if all_epb else int(hdr[i])
            raise located_error(CaptureError, int(pos[i]), f"{self.path}: pcapng packet: caplen got "
                         f"{int(cap[i])}, expected <= {int(blen[i]) - h - 4} (its block)")
        rec["offset"] = pos + hdr
        rec["record"] = pos
        rec["caplen"] = cap
        rec["orig_len"] = orig
        rec["interface"] = glob
        # this section's interfaces only: a file of many sections must not cost its whole
        # interface list per batch
        lts = np.array([itf.linktype for itf in own], np.int64)
        rec["linktype"] = lts[0] if (lts == lts[0]).all() else lts[ifid]
        self._times(rec, ticks, pos, spb, ifid, own, all_epb)
        rec["comment"] = -1
        if self._want_comments:
            opt = pos + hdr + pad4(cap)
            end = pos + blen - 4
            dense = n > 1 and int(pos[-1] - pos[0]) < 1024 * (n - 1)
            if all_epb:
                rec["comment"] = self._codes(comment_spans(self.views, order, opt, end, self.path),
                                             dense)
            else:
                has = np.flatnonzero(~spb)
                rec["comment"][has] = self._codes(comment_spans(self.views, order, opt[has],
                                                                end[has], self.path), dense)
        return rec

    def _times(self, rec, ticks, pos, spb, ifid, own, all_epb) -> None:
        """time_ns from the 64-bit ticks, per group of the section's interfaces ``own``
        sharing if_tsresol/offset (``ifid``: the packets' interface ids in the section)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for i, itf in enumerate(own):
            groups.setdefault((itf.tsresol, itf.tsoffset_s), []).append(i)
        if len(groups) == 1 and all_epb:
            rec["time_ns"] = self._ticks_to_ns(ticks, *next(iter(groups)), pos)
            return
        rec["time_ns"] = NO_TIME
        for (res, off), members in groups.items():
            sel = np.flatnonzero(np.isin(ifid, members) & ~spb)
            if sel.size:
                rec["time_ns"][sel] = self._ticks_to_ns(ticks[sel], res, off, pos[sel])

    def _ticks_to_ns(self, ticks, tsresol: int, offset_s: int, pos) -> np.ndarray:
        if tsresol == 9 and offset_s == 0:                 # ours: the ticks are the ns
            ns, bad = ticks.view(np.int64), ticks >= np.uint64(1 << 63)
        else:
            ns, bad = tsresol_to_ns(ticks, tsresol, offset_s)
        if bad.any():
            p = int(pos[np.flatnonzero(bad)[0]])
            raise located_error(CaptureError, p, f"{self.path}: pcapng timestamp with if_tsresol "
                         f"0x{tsresol:02x}: got a time that int64 ns cannot hold")
        return ns

    def _codes(self, spans, dense: bool) -> np.ndarray:
        """Comment codes (int32 (n,), -1 for none) from :func:`comment_spans` output."""
        n, idx, at, size = spans
        codes = np.full(n, -1, np.int32)
        if idx.size:
            for texts, rows, inv in distinct_texts(self.views, at, size, dense):
                codes[idx[rows]] = self._label_codes(texts)[inv]
        return codes
