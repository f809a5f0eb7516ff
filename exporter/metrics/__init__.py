"""The one metrics catalog (every exported name comes from `catalog`) and its docs generator."""
