"""Subcommands of the ``shardyard`` CLI, one module each."""
