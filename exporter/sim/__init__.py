"""The simulated SGLang server and fake NVML: the embedded default of `make demo` and the
test double where the real thing needs a GPU. Labelled a simulator wherever it shows."""
