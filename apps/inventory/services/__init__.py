"""Writes to the ledger. Each module owns one concern:

- discovery: node reports (SMI outputs) → upsert nodes, devices, links; lost / found
- ledger: status changes (maintenance, quarantine, retire), CSV/XLSX import
"""
