"""The in-process HiCache index-K probe (runs inside SGLang; optional extra ``[probe]``).

Layout: ``boot`` (the ``.pth`` entry point), ``hooks`` (post-import hook), ``targets`` (what
is wrapped), ``runtime`` (state and counters), ``timeline`` (transfer-gap clocks), ``verify``
(sampled checksums), ``memory`` (the configurator's sizing call and the pool's tensor bytes,
measured at start-up), ``writer`` (reporter thread), ``snapshot`` (the file format, also used by
the sidecar and the simulator), ``install`` (puts the ``.pth`` in place by hand).

Importing this package imports nothing heavy: no torch, no SGLang, no prometheus_client.
"""
