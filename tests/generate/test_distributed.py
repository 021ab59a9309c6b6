"""generate on a Dask cluster: the files of ``--jobs 1`` byte for byte, the plan's payload, and
nothing finished-looking left by a failed, killed or cancelled run."""
from __future__ import annotations

import filecmp
import os
import signal
import threading
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed", reason="the 'dask' extra is not installed")
import dask

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import OutputError
from tokenpcap.generate import output
from tokenpcap.generate.distributed import generate_on_cluster
from tokenpcap.generate.run import GenerateOptions, generate
from tokenpcap.pcap.outputset import STAGE_PREFIX

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
CROSS = ROOT / "profiles" / "scenarios" / "gpt2-all-cross.yaml"


@pytest.fixture(scope="module")
def client():
    """Two workers in this process (threads): cheap to start, and monkeypatching reaches them."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def visible(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if not p.name.startswith("."))


def same_files(a, b) -> None:
    names = [p.name for p, _, _ in a.files]
    assert names == [p.name for p, _, _ in b.files]
    assert [(pk, by) for _, pk, by in a.files] == [(pk, by) for _, pk, by in b.files]
    for pa, pb in zip((p for p, _, _ in a.files), (p for p, _, _ in b.files)):
        assert filecmp.cmp(pa, pb, shallow=False), pa.name


def test_dante_on_two_workers_is_byte_identical_to_one_job_and_equals_the_plan(client, tmp_path):
    s = load_scenario(DANTE)
    (tmp_path / "one").mkdir()
    one = generate(s, GenerateOptions(out_dir=tmp_path / "one", scale=64, jobs=1))
    seen = []
    res = generate_on_cluster(s, GenerateOptions(out_dir=tmp_path, scale=64), client,
                              progress=lambda d, t: seen.append((d, t)))
    assert len(res.files) == 32 and visible(tmp_path) == sorted(["one"] + visible(tmp_path / "one"))
    same_files(one, res)
    # the summary summed from the shards: the plan's NIC bytes per phase, the one-job totals
    assert res.phase_payload == {r.name: r.nic_bytes for r in res.plan.rows if r.nic_bytes}
    assert res.nic_payload.tolist() == res.plan.nic_bytes_per_nic().tolist()
    for k in ("packets", "file_bytes", "expected_bytes", "cts_packets", "cts_payload",
              "ack_packets", "first_ns", "last_ns", "phase_packets"):
        assert getattr(res, k) == getattr(one, k), k
    assert res.file_bytes == res.expected_bytes
    assert seen and seen[-1] == (one.packets, one.packets)


@pytest.mark.slow
def test_dp_tp_pp_across_nodes_is_byte_identical_to_one_job(client, tmp_path):
    s = load_scenario(CROSS)
    (tmp_path / "one").mkdir()
    opt = GenerateOptions(out_dir=tmp_path / "one", scale=8, jobs=1)
    one = generate(s, opt)
    res = generate_on_cluster(s, GenerateOptions(out_dir=tmp_path, scale=8), client, shards=3)
    same_files(one, res)
    assert res.phase_payload == {r.name: r.nic_bytes for r in res.plan.rows if r.nic_bytes}
    assert res.phase_payload == one.phase_payload


def test_a_failing_task_names_its_shard_and_leaves_nothing(client, tmp_path, monkeypatch):
    def broken(self, packets, labels, codes):
        raise OutputError(f"{self.spec.path.name}: write failed: No space left on device")

    monkeypatch.setattr(output.Sink, "add", broken)
    with pytest.raises(OutputError, match=r"^shard \d \(NICs [0-9,-]+\): dante_node.*No space"):
        generate_on_cluster(load_scenario(DANTE), GenerateOptions(out_dir=tmp_path, scale=64),
                            client)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_cancels_the_tasks_and_leaves_nothing(client, tmp_path):
    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_on_cluster(load_scenario(DANTE), GenerateOptions(out_dir=tmp_path, scale=64),
                            client, progress=interrupt)
    # nothing that looks finished: at most the hidden stage of a task that outlived the wait
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []
    deadline = time.monotonic() + 30           # the cancelled tasks stop, nothing is processing
    while client.processing() and any(client.processing().values()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []
    # the next run into the directory removes what is left and lands its whole set
    res = generate_on_cluster(load_scenario(DANTE), GenerateOptions(out_dir=tmp_path, scale=64),
                              client)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f, _, _ in res.files)


@pytest.mark.slow
def test_a_worker_killed_mid_write_leaves_no_finished_file_and_a_rerun_completes_the_set(tmp_path):
    s = load_scenario(CROSS)
    ref = tmp_path / "ref"
    ref.mkdir()
    one = generate(s, GenerateOptions(out_dir=ref, snaplen=128, jobs=1))
    out = tmp_path / "out"
    out.mkdir()
    opt = GenerateOptions(out_dir=out, snaplen=128)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        pids = list(c.run(os.getpid).values())
        box: dict = {}

        def run():
            try:
                generate_on_cluster(s, opt, c)
            except BaseException as err:  # noqa: BLE001 - handed to the test thread
                box["err"] = err

        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 120
        while not any(out.glob(f"{STAGE_PREFIX}*/.shard-*/*")):   # a shard has opened its files
            assert time.monotonic() < deadline and t.is_alive()
            time.sleep(0.02)
        os.kill(pids[0], signal.SIGKILL)
        t.join(120)
        assert isinstance(box.get("err"), OutputError), box
        assert str(box["err"]).startswith("shard ")
        assert visible(out) == [] and list(out.iterdir()) == []
        res = generate_on_cluster(s, opt, c)          # the rerun: a whole, identical set
    same_files(one, res)


def test_a_time_window_that_keeps_nothing_is_refused_and_leaves_nothing(client, tmp_path):
    from tokenpcap.errors import InputError
    from tokenpcap.generate.run import Selection

    opt = GenerateOptions(out_dir=tmp_path, scale=64,
                          selection=Selection(window_ns=(10**12, 2 * 10**12)))
    with pytest.raises(InputError, match="--time-window: got .* which keeps no packet"):
        generate_on_cluster(load_scenario(DANTE), opt, client)
    assert list(tmp_path.iterdir()) == []
