"""Changing a workflow while its runs are in flight: diff, histories, replay, migration."""
