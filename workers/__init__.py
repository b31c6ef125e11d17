"""Celery app and tasks: thin wrappers that call shardcore and record progress in the catalog."""

from workers.celery import app

__all__ = ["app"]
