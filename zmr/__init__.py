"""zmr: the tool behind zero-mismatch RL.

The library is usable without the CLI: `zmr.manifest` loads and validates
manifests, `zmr.series` reads patch series, `zmr.cache` keeps upstream
mirrors, `zmr.replay` applies a series in a throwaway index (trees and
commits), `zmr.build` builds and verifies release branches, and
`zmr.evidence.mismatch` compares log-prob dumps. Only `zmr.git` starts git.
"""

__version__ = "0.2.0"
