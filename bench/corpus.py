"""The realistic object corpus lives in `recipes/corpus.py`, shared by the benchmarks and the recipes' workloads;
`bench.corpus` is that same module."""
import sys

from recipes import corpus

sys.modules[__name__] = corpus
