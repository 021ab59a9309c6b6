"""The README's Wireshark display filters show what its table says: each filter, given to
TShark on NIC 0's capture of the default scenario, shows the number of frames the table gives."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import needs_tshark, tshark_path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_filters() -> list[tuple[str, int]]:
    """(filter, frames) of every row of the README's display-filter table."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| filter | shows | frames |"):].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        m = re.fullmatch(r"\| `(.+?)` \| .+ \| ([\d,]+) \|", line)
        assert m, line
        rows.append((m.group(1).replace("\\|", "|"), int(m.group(2).replace(",", ""))))
    return rows


def test_the_table_has_its_rows():
    assert len(readme_filters()) == 7


@needs_tshark
def test_each_filter_shows_the_frames_the_readme_says(tmp_path):
    gen = pytest.importorskip("tokenpcap.generate.run")
    from tokenpcap.config.profiles import default_scenario_path, load_scenario

    # NIC 0's frames of the default run, every header kept (the filters read comments and the
    # BTH only): the frames of dante_node00_nic0.pcapng, without their payload
    res = gen.generate(load_scenario(default_scenario_path()), gen.GenerateOptions(
        out_dir=tmp_path, fmt="pcapng", split="nic", snaplen=96,
        selection=gen.Selection(nics=frozenset({0}))))
    (path, _, _), = res.files
    assert path.name == "dante_node00_nic0.pcapng"
    for flt, frames in readme_filters():
        out = subprocess.run([tshark_path(), "-r", str(path), "--disable-heuristic",
                              "rpcrdma_infiniband", "-Y", flt, "-T", "fields", "-e",
                              "frame.number"], capture_output=True, text=True, check=True)
        assert len(out.stdout.splitlines()) == frames, flt
