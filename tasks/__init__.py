"""Prefect tasks: one thin module per pipeline stage (ingest, graph, partition, export, solve,
measure, evaluate). Each calls ``mdp_core``, reads and writes the artifact store, and returns an
:class:`artifacts.store.ArtifactRef`. Cache keys: :mod:`tasks.cache`."""
