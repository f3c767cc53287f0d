"""Data-quality gates: Great Expectations suites over workloads, harvest records and training examples."""
