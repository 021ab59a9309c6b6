"""``tokenpcap generate ... --dask ADDRESS|local[:N]``: the run on a Dask cluster, with its
announcement and a progress bar fed by the tasks (the library side is
:mod:`tokenpcap.generate.distributed`)."""
from __future__ import annotations

import sys

from tokenpcap.cli.common import Terminated, terminate_like_interrupt
from tokenpcap.cli.generate_cmd import _console, output_directory, stopped
from tokenpcap.config.profiles import Scenario
from tokenpcap.generate.distributed import dask_client, generate_on_cluster
from tokenpcap.generate.run import GenerateOptions, GenerateResult
from tokenpcap.records.text import counted

__all__ = ["generate_on_dask"]


def generate_on_dask(s: Scenario, opt: GenerateOptions, address: str) -> GenerateResult:
    """Create ``opt.out_dir``, connect (or start a local cluster), generate on it; Ctrl-C and
    SIGTERM cancel the tasks and leave the directory as it was (removed if created here)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    out = _console()
    err = Console(file=sys.stderr)
    bar: dict = {}

    def announce(info: dict) -> None:
        what = "at most " if info["upper_bound"] else ""
        out.print(f"writing {counted(info['files'], opt.fmt + ' file')} to {opt.out_dir} in "
                  f"{counted(info['shards'], 'shard')} on the cluster: {what}{info['packets']:,} "
                  f"packets, {what}{info['record_bytes']:,} bytes of records plus each file's "
                  f"header ({info['free_bytes']:,} bytes free here)")

    def progress(done: int, total: int) -> None:
        if "p" not in bar:
            p = Progress(TextColumn("packets"), BarColumn(),
                         TextColumn("{task.completed:,}/{task.total:,}"), TimeRemainingColumn(),
                         console=err, transient=True, disable=not err.is_terminal)
            p.start()
            bar["p"], bar["t"] = p, p.add_task("packets", total=total)
        bar["p"].update(bar["t"], completed=done)

    try:
        with output_directory(opt.out_dir), terminate_like_interrupt(), \
                dask_client(address) as client:
            return generate_on_cluster(s, opt, client, progress=progress, announce=announce)
    except (Terminated, KeyboardInterrupt) as err:
        stopped(err, opt.out_dir, "tasks cancelled")
    finally:
        if "p" in bar:
            bar["p"].stop()
