"""Writes to the ledger. Each module owns one concern:

- ledger (a package): status changes (maintenance, quarantine, retire), the one writer of ledger
  events (``ledger.events``), the one way a node and its cards enter the ledger (``ledger.nodes``),
  CSV/XLSX import and export
- discovery (a package): node reports (SMI outputs) → upsert nodes, devices, links; lost / found
"""
