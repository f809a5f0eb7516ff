"""dsv4-sidecar: watch a DeepSeek-V4 SGLang deployment for KV over-commit and tool-call corruption."""

__version__ = "0.1.0"
