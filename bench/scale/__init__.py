"""Scale benchmarks: each stage at three sizes 100x apart, its per-unit cost and peak memory,
the fitted growth and the extrapolation to a 15 T-token corpus (see README.md)."""
