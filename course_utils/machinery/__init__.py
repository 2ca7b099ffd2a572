"""Machinery engineers read: model files, paths, processes, metrics, stop rules, checkpoints, reports."""
