"""Benchmark and sample-making scripts: run each from the checkout root as
``python -m tools.<script> ...`` (``--help`` lists its flags)."""
