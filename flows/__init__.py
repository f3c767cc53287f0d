"""Prefect flows over the pipeline's stage functions (the same ones `dvc repro` runs through the CLI)."""
