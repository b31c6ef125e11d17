"""Decontamination: which documents overlap the benchmark items a model will be evaluated
on. ``spec`` reads the benchmarks a user names, ``text`` normalizes and hashes word
n-grams, ``index`` compiles the benchmark side once and matches documents against it;
the ``decon`` annotator (``shardcore.annotate.decon``) writes the per-document columns."""
