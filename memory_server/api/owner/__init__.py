"""The owner of a store for local clients: its socket sessions (sessions.py) and the process a stdio bridge
starts (daemon.py)."""
