"""Imports every command module so that it registers on :data:`tokenpcap.cli.main`.

Add one import line per command module (keep them sorted).
"""
from tokenpcap.cli import compare_cmd  # noqa: F401
from tokenpcap.cli import export_cmd  # noqa: F401
from tokenpcap.cli import generate_cmd  # noqa: F401
from tokenpcap.cli import inspect_cmd  # noqa: F401
from tokenpcap.cli import plan_cmd  # noqa: F401
from tokenpcap.cli import plot_cmd  # noqa: F401
from tokenpcap.cli import readdress_cmd  # noqa: F401
from tokenpcap.cli import run_cmd  # noqa: F401
from tokenpcap.cli import tokens_cmd  # noqa: F401
from tokenpcap.cli import trace_cmd  # noqa: F401
