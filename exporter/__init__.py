"""dsv4-sidecar: watch DeepSeek-V4 on SGLang for KV over-commit and tool-call corruption."""

__version__ = "0.1.0"
