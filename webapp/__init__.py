"""Shardyard's Django project: settings, URLs and the apps that keep the catalog."""
