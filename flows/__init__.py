"""Prefect flows composing the tasks in ``tasks/`` (and the ``mdp-release`` CLI)."""
