"""Exports: the timed RDMA messages of a scenario for simulators, testbeds and viewers."""
