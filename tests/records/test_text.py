"""counted: a count with its noun in the right number, thousands separated."""
from __future__ import annotations

from hypothesis import given, strategies as st

from tokenpcap.records.text import counted


def test_singular_plural_and_separators():
    assert counted(1, "sequence") == "1 sequence"
    assert counted(0, "sequence") == "0 sequences"
    assert counted(1726, "token") == "1,726 tokens"
    assert counted(1, "NIC pair") == "1 NIC pair" and counted(2, "NIC pair") == "2 NIC pairs"
    assert counted(3, "late/duplicate", "late/duplicate") == "3 late/duplicate"


@given(st.integers(min_value=0, max_value=10**12))
def test_the_number_reads_back(n: int):
    number, noun = counted(n, "flow").split(" ")
    assert int(number.replace(",", "")) == n and (noun == "flow") == (n == 1)
