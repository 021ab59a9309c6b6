"""The machine's memory and the state one run may plan to hold (tokenpcap.schedule.machine).

Oracles: POSIX ``sysconf`` (read here independently, and ``/proc/meminfo``'s MemTotal, which
the kernel reports from the same pages less what it reserves), and the control-group files'
formats as the kernel documents them (cgroup v2 ``memory.max``: a byte count or ``max``;
cgroup v1 ``memory.limit_in_bytes``: a byte count, a page-aligned LONG_MAX for none).
"""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

from hypothesis import given, strategies as st

from tokenpcap.schedule import limits, machine


def _physical() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_without_cgroup_limit_the_physical_memory(tmp_path):
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")
    v1.write_text("9223372036854771712\n")       # v1's "no limit": above any machine's memory
    assert machine.memory_bytes((v2, v1)) == _physical()
    assert machine.memory_bytes((tmp_path / "absent",)) == _physical()


def test_physical_memory_agrees_with_meminfo():
    total_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemTotal:"))
    # MemTotal is the physical pages less the kernel's reservations: a few percent below
    assert 0.9 * machine.memory_bytes(()) <= total_kib * 1024 <= machine.memory_bytes(())


def test_a_cgroup_limit_below_the_machine_is_the_memory(tmp_path):
    v2 = tmp_path / "memory.max"
    v2.write_text("4294967296\n")
    assert machine.memory_bytes((v2,)) == min(4294967296, _physical())
    v1 = tmp_path / "memory.limit_in_bytes"
    v1.write_text("2147483648\n")
    # every group on the path binds: the lowest limit is the memory
    assert machine.memory_bytes((v2, v1)) == min(2147483648, _physical())
    assert machine.memory_bytes((tmp_path / "absent", v1)) == min(2147483648, _physical())


def test_the_groups_files_are_the_named_group_and_its_ancestors(tmp_path):
    """``/proc/self/cgroup`` as the kernel writes it (cgroup(7): ``id:controllers:path``; v2 is
    ``0::path``): a limit set on an ancestor of the process's group is found."""
    text = "0::/user.slice/run.scope\n4:memory:/jobs/job7\n3:cpuset:/\n"
    files = machine.cgroup_limit_files(text, root=tmp_path)
    assert set(files) == {
        tmp_path / "memory.max", tmp_path / "memory" / "memory.limit_in_bytes",
        tmp_path / "user.slice" / "run.scope" / "memory.max", tmp_path / "user.slice" / "memory.max",
        tmp_path / "memory" / "jobs" / "job7" / "memory.limit_in_bytes",
        tmp_path / "memory" / "jobs" / "memory.limit_in_bytes"}
    parent = tmp_path / "user.slice"
    (parent / "run.scope").mkdir(parents=True)
    (parent / "run.scope" / "memory.max").write_text("max\n")
    (parent / "memory.max").write_text("3221225472\n")
    assert machine.memory_bytes(files) == min(3221225472, _physical())


@given(st.integers(min_value=1, max_value=1 << 50))
def test_state_limit_is_three_fifths_rounded_down(memory):
    got = machine.state_limit_bytes(memory)
    assert got == memory * 3 // 5 and Fraction(got) <= Fraction(3, 5) * memory < got + 1


def test_the_engine_limit_is_the_machines():
    # the process's own cgroup files (module defaults), read as the limit is at import
    assert limits.MAX_STATE_BYTES == machine.state_limit_bytes()
    assert limits.MACHINE_MEMORY_BYTES == machine.memory_bytes()
    assert limits.MAX_MESSAGES == limits.MAX_STATE_BYTES // limits.MESSAGE_STATE_BYTES
    assert limits.MAX_STATE_BYTES <= 0.6 * _physical()
