"""warm: the made-up batch that loads the writers' compiled functions in the parent is a valid
batch on every transport (its frames equal the scalar reference build_frame), it is written
through the run's own format and dropped (nothing left behind, no thread left running before
the fork), and the functions it loads are the ones a batch calls."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.wire.test_builder import CONTEXTS, make_ctx
from tokenpcap.config.profiles import load_cluster
from tokenpcap.generate import output
from tokenpcap.generate.warm import load_writer_functions, sample_rows
from tokenpcap.wire import FrameBuilder, build_frame

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("which", range(len(CONTEXTS)))
def test_sample_rows_are_frames_of_every_transport(which):
    ctx = make_ctx(np.random.default_rng(which), **CONTEXTS[which])
    b = FrameBuilder(ctx)
    p = sample_rows(b, 1)
    assert (p["frame_bytes"] == b.frame_bytes(p)).all()
    for r, frame in zip(p, b.frames(p)):
        assert frame == build_frame(r, ctx)


@pytest.mark.parametrize("fmt", ["pcap", "pcapng", "erf"])
def test_the_throwaway_file_is_written_and_dropped(tmp_path, fmt):
    from tokenpcap.wire import direct
    c = load_cluster(str(ROOT / "profiles" / "clusters" / "h100-rocev2-8x1.yaml"))
    cfg = output.WriterConfig(c, fmt, 74, 1, {i: (f"node{i}/nic0", "x") for i in range(8)})
    spec = output.FileSpec(tmp_path / f"f.{fmt}", (3,))
    written = []

    def writer(sp):
        written.append(sp.path)
        return output.open_writer(sp, cfg, threaded=False)

    threads = threading.active_count()
    load_writer_functions(spec, cfg, output._builder(cfg), writer)
    assert threading.active_count() == threads
    assert len(written) == 1 and not written[0].parent.exists() and not list(tmp_path.iterdir())
    assert direct.fill_rows.signatures          # the frame loop is loaded in this process
    if fmt == "pcap":                           # and a headers-only pcap's in-place records
        from tokenpcap.generate import inplace
        assert inplace._build_records.signatures and inplace._all_served.signatures
