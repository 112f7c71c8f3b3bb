"""The infrastructure layer: git, files, locks, fault points, the upstream mirrors and the one journal for multi-file writes.

It knows no manifest, series or command: it imports nothing of zmr outside zmr.infra
(tests/test_architecture.py, ``LAYERS``). Only `zmr.infra.git` starts git.
"""
