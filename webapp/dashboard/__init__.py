"""The dashboard: server-rendered pages over the catalog, jobs and runs, roles and charts."""
