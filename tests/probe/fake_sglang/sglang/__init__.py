"""Test-only stand-in for the parts of SGLang the probe wraps (own code, same names and call
shapes as the public source). Not a package of dsv4-sidecar: tests put its parent on sys.path."""
