"""shardcore: the data work of Shardyard — read, tokenize, pack, shuffle, mix, order,
measure and resume. A pure library: it imports neither Django nor Celery, so the same
functions run in a local process pool, in a Celery task or in a training loop."""

__version__ = "0.1.0"
