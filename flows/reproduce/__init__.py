"""The reproduction harness (``mdp-release reproduce``): the papers' experiment grids run as a cached
Prefect flow, compared with the published numbers in one report.

Modules: :mod:`~flows.reproduce.experiments` (the experiments, pure: numbers in, tables out),
``published.json`` (the papers' numbers), :mod:`~flows.reproduce.compare` (ours vs published:
verdicts and reasons), :mod:`~flows.reproduce.report` (settings, differences, markdown, figures),
:mod:`~flows.reproduce.stages` (one cached Prefect task per experiment) and
:mod:`~flows.reproduce.flow` (the flow, its config and the CLI entry point). Only the last two
import Prefect.
"""
