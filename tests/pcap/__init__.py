"""Tests of tokenpcap.pcap: capture writers and readers against independent oracles."""
