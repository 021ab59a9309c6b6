"""tokenpcap.cli.textout: a path that is not UTF-8 is printed with ``\\xff`` escapes by every
command, on a strict UTF-8 stdout too (``PYTHONIOENCODING=utf-8``, a UTF-8 locale other than C),
instead of a ``UnicodeEncodeError`` traceback after the output was written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tokenpcap.cli.textout import ERRORS
from tokenpcap.pcap.pathlimits import shown

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


def test_undecodable_bytes_are_escaped_as_messages_show_them():
    name = os.fsdecode(b"/tmp/\xff\xfe.csv")
    assert name.encode("utf-8", ERRORS) == b"/tmp/\\xff\\xfe.csv"
    assert name.encode("utf-8", ERRORS).decode() == shown(name)
    assert "caf\u00e9 \u2192".encode("ascii", ERRORS) == b"caf\\xe9 \\u2192"
    assert "caf\u00e9".encode("utf-8", ERRORS) == "caf\u00e9".encode()   # UTF-8 stays itself


def test_export_to_a_name_that_is_not_utf8_prints_it_escaped_and_exits_0(tmp_path):
    out = os.fsencode(tmp_path) + b"/\xff.csv"
    env = dict(os.environ, PYTHONIOENCODING="utf-8")          # a strict stdout
    r = subprocess.run([sys.executable, "-m", "tokenpcap", "export", str(DANTE), "--to", "csv",
                        "--scale", "64", "-o", os.fsdecode(out)],
                       cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout.decode() == f"{tmp_path}/\\xff.csv\n"
    assert b"Traceback" not in r.stderr
    assert os.listdir(os.fsencode(tmp_path)) == [b"\xff.csv"]
