"""Benchmarks (`make bench`): each bench/bench_*.py has ``run(quick: bool) -> str`` returning a
Markdown section; results land in bench/RESULTS.md between that module's markers."""
