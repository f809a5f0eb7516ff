"""One module per data source (NVML, SGLang, probe files, samplers). See `base` for the contract."""
