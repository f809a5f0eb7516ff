"""`triage`: collect evidence (sidecar, Prometheus, repro results, sample files), apply the
diagnosis rules, write a one-page report (HTML with plots, Markdown for tickets).

Layers: :mod:`.http` and :mod:`.evidence` do the I/O; :mod:`.diagnosis` is pure rules over
the collected :class:`~.evidence.Evidence`; :mod:`.report_md`, :mod:`.report_html` and
:mod:`.plots` render.
"""
