"""captures: a directory argument stands for one run's complete set of captures. A run killed
by SIGKILL (a real child process, killed while writing or between two of its final renames)
leaves a hidden stage: its files are never read as the run's output, and a directory holding
part of a new set beside part of the earlier one is refused in one line until the next run
completes it."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.analysis.trace import write_trace
from tokenpcap.cli import main
from tokenpcap.cli.captures import capture_paths
from tokenpcap.errors import InputError
from tokenpcap.pcap.outputset import STAGE_PREFIX, OutputSet

ROOT = Path(__file__).resolve().parents[2]
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs SIGKILL")

#: the child: a run of two files into DIR that SIGKILLs itself while writing (after the first
#: file is staged) or while renaming (after the first file is in place, the marker written)
CHILD = """
import os, shutil, signal, sys
from pathlib import Path
import tokenpcap.pcap.outputset as o
out, new, when = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
s = o.OutputSet(out, what="test")
shutil.copyfile(new / "a.pcapng", s.path("a.pcapng"))
if when == "writing":
    os.kill(os.getpid(), signal.SIGKILL)
shutil.copyfile(new / "b.pcapng", s.path("b.pcapng"))
real = os.replace
def replace(src, dst):
    real(src, dst)
    if Path(dst).parent == out:
        os.kill(os.getpid(), signal.SIGKILL)
o.os.replace = replace
s.commit()
"""


def _inspect(d: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["inspect", str(d), "--json"])
    return r.exit_code, r.output


def _sets(tmp_path: Path) -> tuple[Path, Path]:
    """An earlier set (200 packets per file) in ``out`` and a new one (300) in ``new``."""
    out, new = tmp_path / "out", tmp_path / "new"
    for d, n in ((out, 200), (new, 300)):
        d.mkdir()
        for name in ("a.pcapng", "b.pcapng"):
            write_trace(d / name, n, fmt="pcapng")
    return out, new


def _killed(out: Path, new: Path, when: str) -> None:
    r = subprocess.run([sys.executable, "-c", CHILD, str(out), str(new), when], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr


@LINUX
def test_a_run_killed_while_writing_leaves_the_earlier_set_readable(tmp_path):
    out, new = _sets(tmp_path)
    code, before = _inspect(out)
    _killed(out, new, "writing")
    assert [p.name for p in out.iterdir() if p.name.startswith(STAGE_PREFIX)]   # left behind
    code_after, after = _inspect(out)
    assert (code, code_after) == (0, 0)
    assert json.loads(after)["packets"] == json.loads(before)["packets"] == 400
    assert capture_paths([str(out)]) == [str(out / "a.pcapng"), str(out / "b.pcapng")]


@LINUX
def test_a_run_killed_between_its_renames_is_refused_until_the_next_run_completes_it(tmp_path):
    out, new = _sets(tmp_path)
    _killed(out, new, "renaming")
    stage = next(p for p in out.iterdir() if p.name.startswith(STAGE_PREFIX))
    assert (out / "a.pcapng").read_bytes() == (new / "a.pcapng").read_bytes()    # new a
    assert (out / "b.pcapng").stat().st_size < (new / "b.pcapng").stat().st_size  # old b
    code, text = _inspect(out)
    assert code == 1 and text.count("\n") == 1 and "Traceback" not in text
    assert text == (f"error: {out}: got a run stopped while moving its files into place (1 of "
                    f"them still in {stage.name}), expected one run's complete set of files "
                    "(the next tokenpcap run into the directory completes it, e.g. the same "
                    "command again)\n")
    with pytest.raises(InputError, match="stopped while moving"):
        capture_paths([str(out)])
    OutputSet(out).abort()                       # what the next run does first
    code, text = _inspect(out)
    assert code == 0 and json.loads(text)["packets"] == 600                       # the new set
