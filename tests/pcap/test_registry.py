"""The capture-format registry (tokenpcap.pcap.registry): what ``--format`` offers, which
transport each holds, and record sizes that equal what the writers put in the file."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.pcap import Interface
from tokenpcap.pcap.registry import CAPTURE_FORMATS, capture_format, transport_mismatch
from tests.pcap.helpers import frames_fill, make_frames


def test_formats_and_transports():
    assert list(CAPTURE_FORMATS) == ["pcap", "pcapng", "erf"]
    # ERF type 21 is the InfiniBand record (Endace EDM11-01); RoCEv2 frames are Ethernet.
    assert transport_mismatch("erf", "rocev2") == (
        "got 'erf' for transport 'rocev2', expected pcap or pcapng (ERF type 21 records hold "
        "native InfiniBand only)")
    assert transport_mismatch("erf", "infiniband") is None
    with pytest.raises(InputError, match="--format: got 'pcapx', expected one of pcap, pcapng, erf"):
        capture_format("pcapx")
    # Record headers from the specs, not from our declarations: pcap 16 (ts_sec, ts_frac,
    # incl_len, orig_len), pcapng EPB 28 + 4 trailing length, ERF 16.
    assert capture_format("pcap").record_bytes(100, erf_wrapped=False) == 116
    assert capture_format("pcap").record_bytes(100, erf_wrapped=True) == 132
    assert capture_format("pcapng").record_bytes(101, erf_wrapped=False) == 32 + 104
    assert capture_format("erf").record_bytes(100, erf_wrapped=True) == 116


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(list(CAPTURE_FORMATS)), st.lists(st.integers(1, 9000), min_size=1,
                                                         max_size=20), st.integers(40, 9000))
def test_record_bytes_equal_the_written_file(tmp_path_factory, name, lengths, snaplen):
    """The size a run predicts (file header + record bytes) is the size of the file written."""
    fmt = capture_format(name)
    ib = name == "erf"
    link = "infiniband" if ib else "ethernet"
    path = tmp_path_factory.mktemp("reg") / f"x{fmt.extension}"
    frames = make_frames(lengths)
    w = fmt.open(path, link=link, snaplen=snaplen, interfaces=[Interface("nic0", link=link)]
                 if fmt.comments else None, threaded=False)
    head = w.bytes_written if fmt.comments else fmt.file_header
    n = len(frames)
    w.write_batch(np.arange(n, dtype=np.int64), np.array(lengths, np.int64), frames_fill(frames))
    w.close()
    cap = np.minimum(np.array(lengths), snaplen)
    expected = head + int(fmt.record_bytes(cap, erf_wrapped=ib).sum())
    assert path.stat().st_size == expected
