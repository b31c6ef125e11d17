"""Writes for the catalog, one module per entity, named ``<entity>_<action>`` with
keyword-only arguments: ``sources``, ``tokenized`` (tokenizers and tokenized sources),
``pools``, ``mixtures`` (mixtures and their versions), ``exports`` (trainer configs and
materialized copies), ``runs`` and ``flags`` (flags and taint); ``common`` holds what they
share.

These services are the only Django code that calls shardcore. Long stages (tokenize, pool,
mixture version, materialize) become jobs (``webapp.jobs.services.job_create``) whose
recorder, a function here registered under a short name (``webapp.jobs.recorders``; the
job row stores the name), turns the finished manifest into artifact rows in the same
transaction that marks the job succeeded. User mistakes raise
``webapp.catalog.errors.CatalogError`` with a message fit for a page.
"""
