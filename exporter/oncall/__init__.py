"""On-call tools: `repro` (graded A/B load against an endpoint) and `triage` (evidence,
diagnosis and a one-page report). Pure logic lives here; the CLI edges are in exporter.cli."""
