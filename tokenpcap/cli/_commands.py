"""Imports every command module so that it registers on :data:`tokenpcap.cli.main`.

Add one import line per command module (keep them sorted).
"""
