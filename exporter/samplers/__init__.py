"""Samplers: components that observe live traffic and hand samples to graders."""
