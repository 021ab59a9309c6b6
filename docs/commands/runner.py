"""The machinery of docs/commands/measure.py: a scratch workspace that runs commands as a user
types them (in this process, or timed in a fresh one), the marked blocks of the pages, and the
check of a page against a fresh run. measure.py holds the block makers and the command line."""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
PAGES_DIR = ROOT / "docs" / "commands"
MARK = re.compile(r"<!-- measured:([\w.-]+) -->(.*?)<!-- /measured:\1 -->", re.S)


def pages() -> list[Path]:
    """The README, every command page in reading order, and the topic pages that quote a
    measured number."""
    return [ROOT / "README.md", *sorted(PAGES_DIR.glob("*.md")), ROOT / "docs" / "dask.md"]


def sanitize(text: str) -> str:
    """Replace what differs between two identical runs (wall time, free disk bytes) by ``…``."""
    text = re.sub(r"[\d.]+ s wall", "… s wall", text)
    return re.sub(r"\([\d,]+ bytes\s+free\)", "(… bytes free)", text)


def excerpt(text: str, keep: Callable[[int, str], bool], strip: bool = True) -> str:
    """The lines of ``text`` that ``keep(index, line)`` accepts, each run of dropped lines shown
    as one ``…`` line; trailing blanks stripped from every line."""
    out: list[str] = []
    for i, line in enumerate(text.splitlines()):
        if keep(i, line):
            out.append(line.rstrip() if strip else line)
        elif not out or out[-1] != "…":
            out.append("…")
    return "\n".join(out)


def fence(cmds: list[str], body: str) -> str:
    """A fenced block: each command after ``$ ``, then the output."""
    head = "\n".join(f"$ {c}" for c in cmds)
    return f"\n```\n{head}\n{body.rstrip()}\n```\n"


@dataclass
class Workspace:
    """A scratch directory laid out as the repository root (links to profiles, samples, tests),
    where every command runs; output blocks cache each command's stdout by its arguments."""
    path: Path
    lock: Path | None = None
    cache: dict = field(default_factory=dict)
    timings: dict[tuple[str, ...], "Timing"] = field(default_factory=dict)

    @classmethod
    def make(cls, path: Path) -> "Workspace":
        path.mkdir(parents=True, exist_ok=True)
        for name in ("profiles", "samples", "tests"):
            link = path / name
            if not link.exists():
                link.symlink_to(ROOT / name)
        return cls(path)

    def cli(self, *args: str) -> str:
        """stdout of ``tokenpcap ARGS`` run in this process from the workspace (cached),
        sanitized. Raises RuntimeError naming the command when it exits non-zero."""
        if args not in self.cache:
            from click.testing import CliRunner

            from tokenpcap.cli import main
            old = Path.cwd()
            os.chdir(self.path)
            try:
                r = CliRunner().invoke(main, list(args))
            finally:
                os.chdir(old)
            if r.exit_code != 0:
                raise RuntimeError(f"tokenpcap {' '.join(args)}: exit {r.exit_code}: "
                                   f"{r.output[-2000:]}{r.exception!r}")
            self.cache[args] = sanitize(r.stdout)
        return self.cache[args]

    def timed(self, *args: str, expect_fail: bool = False, big: bool = False) -> "Timing":
        """``python3 -m tokenpcap ARGS`` in a fresh process from the workspace, under
        /usr/bin/time: its stdout, stderr, wall s, peak RSS bytes and CPU s, with the load
        (cached by ARGS). ``big``: a run of several GB, started only once :attr:`lock` (when set)
        is held, so that two such runs never overlap on a shared machine; the wait is not timed.
        Raises RuntimeError when its exit status is not the expected one."""
        if args in self.timings:
            return self.timings[args]
        if big and self.lock is not None:
            import fcntl
            with open(self.lock, "a") as lf:
                fcntl.flock(lf, fcntl.LOCK_EX)
                try:
                    return self.timed(*args, expect_fail=expect_fail)
                finally:
                    fcntl.flock(lf, fcntl.LOCK_UN)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        fmt = "%e %M %U %S"
        t0 = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        load0 = loadavg()
        with tempfile.NamedTemporaryFile("r") as tf:
            r = subprocess.run(["/usr/bin/time", "-f", fmt, "-o", tf.name, sys.executable, "-m",
                                "tokenpcap", *args], cwd=self.path, env=env,
                               capture_output=True, text=True)
            wall, rss_kb, user, sys_s = tf.read().split()[-4:]
        if (r.returncode != 0) != expect_fail:
            raise RuntimeError(f"tokenpcap {' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
        t = Timing(args, sanitize(r.stdout), r.stderr, float(wall), int(rss_kb) * 1024,
                   float(user) + float(sys_s), t0, time.strftime("%H:%M", time.gmtime()),
                   load0, loadavg())
        self.timings[args] = t
        return t


@dataclass
class Timing:
    """One timed command: output, wall clock s, peak RSS bytes, CPU s, start (UTC) and end,
    the 1-minute load average before and after."""
    args: tuple[str, ...]
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_bytes: int
    cpu_s: float
    start: str
    end: str
    load_before: str
    load_after: str

    def line(self) -> str:
        """``wall, CPU, peak RSS (date, load)`` in one sentence for a page."""
        return (f"{self.wall_s:.1f} s of wall clock, {self.cpu_s:.1f} s of CPU, peak RSS "
                f"{self.peak_rss_bytes / 1e9:.2f} GB (measured {self.start}-{self.end} UTC "
                f"under `nice` on {os.cpu_count()} cores shared with other jobs, load average "
                f"{self.load_before} before, {self.load_after} after)")


def loadavg() -> str:
    """The 1-minute load average, as ``uptime`` prints it first."""
    return Path("/proc/loadavg").read_text().split()[0]


BLOCKS: dict[str, tuple[str, Callable[[Workspace], str]]] = {}


def block(name: str, kind: str = "output"):
    """Register the maker of block ``name`` (``output`` or ``timed``)."""
    def add(fn: Callable[[Workspace], str]) -> Callable[[Workspace], str]:
        BLOCKS[name] = (kind, fn)
        return fn
    return add



def pcapng_comments(path: Path) -> list[str]:
    """The comment (option 1) of every Enhanced Packet Block of a little-endian pcapng file, in
    file order; a packet without one gives "" (pcapng, IETF draft-ietf-opsawg-pcapng: block type
    6, its options after the 4-byte-padded packet data)."""
    import struct
    data = path.read_bytes()
    out: list[str] = []
    p = 0
    while p < len(data):
        btype, blen = struct.unpack_from("<II", data, p)
        if btype == 6:
            caplen = struct.unpack_from("<I", data, p + 20)[0]
            q, end, text = p + 28 + (caplen + 3) // 4 * 4, p + blen - 4, ""
            while q + 4 <= end:
                code, olen = struct.unpack_from("<HH", data, q)
                if code == 0:
                    break
                if code == 1:
                    text = data[q + 4:q + 4 + olen].decode()
                q += 4 + (olen + 3) // 4 * 4
            out.append(text)
        p += blen
    return out



# ---- the pages ------------------------------------------------------------------------------

def made(ws: Workspace, names: set[str]) -> dict[str, str]:
    """Each block of ``names`` made, by name."""
    return {n: BLOCKS[n][1](ws) for n in sorted(names)}


def page_blocks(text: str) -> dict[str, str]:
    """NAME -> the text between a page's markers."""
    return {m.group(1): m.group(2) for m in MARK.finditer(text)}


def rewrite(text: str, new: dict[str, str]) -> str:
    """``text`` with the blocks named in ``new`` replaced."""
    def sub(m: re.Match) -> str:
        name = m.group(1)
        body = new.get(name, m.group(2))
        return f"<!-- measured:{name} -->{body}<!-- /measured:{name} -->"
    return MARK.sub(sub, text)


def check(ws: Workspace, texts: dict[Path, str] | None = None) -> list[str]:
    """A unified diff per output block whose page text differs from a fresh run (empty: none);
    a block a page names but no maker makes is a difference too. ``texts``: page -> text
    (default: every page as it is on disk)."""
    if texts is None:
        texts = {p: p.read_text(encoding="utf-8") for p in pages()}
    problems: list[str] = []
    for page, text in texts.items():
        for name, body in page_blocks(text).items():
            if name not in BLOCKS:
                problems.append(f"{page.relative_to(ROOT)}: block {name!r} has no maker in "
                                f"docs/commands/measure.py")
                continue
            if BLOCKS[name][0] != "output":
                continue
            fresh = BLOCKS[name][1](ws)
            if fresh != body:
                diff = difflib.unified_diff(body.splitlines(), fresh.splitlines(),
                                            f"{page.relative_to(ROOT)} ({name})", "fresh run",
                                            lineterm="")
                problems.append("\n".join(diff))
    return problems
