"""``tokenpcap readdress FILE -o OUT --map ...``: retarget a trace to a lab's addresses."""
from __future__ import annotations

from pathlib import Path

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors, output_path
from tokenpcap.errors import InputError


def _vlan(ctx, param, value):
    """``--vlan``: a VID 0..4095, or none/strip/untagged; anything else is a usage error."""
    if value is None or value.strip().lower() in ("none", "strip", "untagged"):
        return value
    try:
        vid = int(value, 0)
    except ValueError:
        vid = None
    if vid is None or not 0 <= vid <= 4095:
        raise click.BadParameter(f"got {value!r}, expected a VID 0..4095 or 'none'")
    return vid


def _is_file_item(item: str) -> bool:
    """A ``--map`` value names a file when something exists at that path (a regular file, or
    anything else, which the mapping reader then refuses by its kind); else it is a pair."""
    try:
        return Path(item).exists() or Path(item).is_symlink()
    except (OSError, ValueError):
        return False


def _pairs(ctx, param, values):
    """``--map``: each value a mapping file or an OLD=NEW address pair; a malformed pair or
    address is a usage error (the file's contents are checked when it is read)."""
    from tokenpcap.analysis.readdress_mapping import Mapping, parse_pair

    probe = Mapping()
    for item in values:
        if not _is_file_item(item):
            try:
                probe.add_address(*parse_pair(item))
            except InputError as err:
                raise click.BadParameter(str(err).removeprefix("--map: ")) from None
    return values


@main.command("readdress")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", required=True, callback=output_path,
              type=click.Path(dir_okay=False, path_type=str),
              help="Output capture (written to a temporary file, renamed at the end).")
@click.option("--map", "maps", multiple=True, metavar="YAML|OLD=NEW", callback=_pairs,
              help="A mapping file (YAML: addresses, vlan, pcp, dscp, ecn, ttl, udp_sport, "
                   "udp_sport_offset) or one address pair OLD=NEW (MAC, IPv4 or IPv6); repeat.")
@click.option("--vlan", callback=_vlan,
              help="802.1Q VID 0-4095 to set (adds a tag to untagged frames), or 'none'.")
@click.option("--pcp", type=click.IntRange(0, 7), help="802.1Q priority 0-7.")
@click.option("--dscp", type=click.IntRange(0, 63), help="IP DSCP 0-63.")
@click.option("--ecn", type=click.IntRange(0, 3), help="IP ECN codepoint 0-3 (2 = ECT(0)).")
@click.option("--ttl", type=click.IntRange(1, 255), help="IPv4 TTL / IPv6 hop limit 1-255.")
@click.option("--sport-offset", type=click.IntRange(0, 0x3FFF),
              help="Rotate UDP source ports inside 0xC000-0xFFFF (0-16383).")
@click.option("--usec", is_flag=True,
              help="Write a classic microsecond pcap (rounded to nearest; not into .pcapng).")
@library_errors
def readdress_cmd(file, output, maps, vlan, pcp, dscp, ecn, ttl, sport_offset, usec) -> None:
    """Rewrite MACs, IPs, VLAN/PCP, DSCP/ECN, TTL and UDP source ports of FILE into OUT,
    recomputing IPv4 checksums, UDP checksums and ICRCs, keeping ns timestamps.

    Truncated frames (a snaplen) stay truncated: their headers are rewritten, but their ICRC is
    not in the capture and cannot be recomputed."""
    if usec and Path(output).suffix.lower() == ".pcapng":
        raise click.UsageError(f"--usec writes a classic microsecond pcap: got -o {output}, "
                               "expected a .pcap name (pcapng output keeps nanoseconds)")
    from tokenpcap.analysis.readdress import readdress
    from tokenpcap.analysis.readdress_mapping import Mapping, load_mapping, parse_pair, set_option

    m = Mapping()
    for item in maps:
        if not _is_file_item(item):
            m.add_address(*parse_pair(item))
        else:
            m.merge(load_mapping(item), f"--map {item}")
    for key, option, value in (("vlan", "--vlan", vlan), ("pcp", "--pcp", pcp),
                               ("dscp", "--dscp", dscp), ("ecn", "--ecn", ecn),
                               ("ttl", "--ttl", ttl),
                               ("udp_sport_offset", "--sport-offset", sport_offset)):
        if value is not None:
            set_option(m, key, value, option)
    s = readdress(file, output, m, usec=usec)
    click.echo(f"{output}: {s['packets']:,} packets, {s['icrc_updated']:,} ICRCs updated, "
               f"{s['ipv4_checksums']:,} IPv4 checksums recomputed")
    if s["unmatched"]:
        click.echo(f"note: no frame of {file} carries {', '.join(s['unmatched'])}: left "
                   "unmapped (check the --map addresses against `tokenpcap inspect`)", err=True)
    if s["truncated"]:
        click.echo(f"{s['truncated']:,} frames are truncated (snaplen) and kept so: their headers "
                   "are rewritten, but their ICRC lies beyond the cut, is not in the capture, "
                   "and cannot be recomputed")
