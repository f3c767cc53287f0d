"""Thin glue over Apache TVM 0.27: targets, the fast build function, the timing protocol, workload I/O.

Everything that knows TVM 0.27's module layout (``tvm.s_tir``, ``tvm.tirx``) lives here, so the rest of
the project reads as plain Python.
"""
