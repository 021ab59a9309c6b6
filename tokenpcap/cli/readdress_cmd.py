"""``tokenpcap readdress FILE -o OUT --map ...``: retarget a trace to a lab's addresses."""
from __future__ import annotations

from pathlib import Path

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors


@main.command("readdress")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Output capture (written to a temporary file, renamed at the end).")
@click.option("--map", "maps", multiple=True, metavar="YAML|OLD=NEW",
              help="A mapping file (YAML: addresses, vlan, pcp, dscp, ecn, ttl, udp_sport, "
                   "udp_sport_offset) or one address pair OLD=NEW (MAC, IPv4 or IPv6); repeat.")
@click.option("--vlan", help="802.1Q VID to set (adds a tag to untagged frames), or 'none'.")
@click.option("--pcp", type=int, help="802.1Q priority 0-7.")
@click.option("--dscp", type=int, help="IP DSCP 0-63.")
@click.option("--ecn", type=int, help="IP ECN codepoint 0-3 (2 = ECT(0)).")
@click.option("--ttl", type=int, help="IPv4 TTL / IPv6 hop limit.")
@click.option("--sport-offset", type=int, help="Rotate UDP source ports inside 0xC000-0xFFFF.")
@click.option("--usec", is_flag=True,
              help="Write a classic microsecond pcap (rounded to nearest; not into .pcapng).")
@library_errors
def readdress_cmd(file, output, maps, vlan, pcp, dscp, ecn, ttl, sport_offset, usec) -> None:
    """Rewrite MACs, IPs, VLAN/PCP, DSCP/ECN, TTL and UDP source ports of FILE into OUT,
    recomputing IPv4 checksums, UDP checksums and ICRCs, keeping ns timestamps."""
    if usec and Path(output).suffix.lower() == ".pcapng":
        raise click.UsageError(f"--usec writes a classic microsecond pcap: got -o {output}, "
                               "expected a .pcap name (pcapng output keeps nanoseconds)")
    from tokenpcap.readdress import Mapping, load_mapping, parse_pair, readdress, set_option

    m = Mapping()
    for item in maps:
        if not Path(item).is_file():
            m.add_address(*parse_pair(item))
        else:
            loaded = load_mapping(item)
            for name in ("mac", "ipv4", "ipv6", "udp_sport"):
                getattr(m, name).update(getattr(loaded, name))
            for name in ("vlan", "pcp", "dscp", "ecn", "ttl", "udp_sport_offset"):
                if getattr(loaded, name) is not None:
                    setattr(m, name, getattr(loaded, name))
    for key, value in (("vlan", vlan), ("pcp", pcp), ("dscp", dscp), ("ecn", ecn), ("ttl", ttl),
                       ("udp_sport_offset", sport_offset)):
        if value is not None:
            set_option(m, key, value, f"--{key.replace('_', '-')}")
    s = readdress(file, output, m, usec=usec)
    click.echo(f"{output}: {s['packets']:,} packets, {s['icrc_updated']:,} ICRCs updated, "
               f"{s['ipv4_checksums']:,} IPv4 checksums recomputed")
