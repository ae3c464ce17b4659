"""threadlog's benchmarks: ratios against baselines measured in the same run.

Run `python -m bench` (quick mode), `python -m bench --full` (the large sizes) or
`python -m bench --smoke` (seconds; checks that every scenario still runs). Each scenario
group is one module exposing `run(mode, workdir) -> list[Measure]`; `__main__` runs them,
prints the table, judges the targets and writes the JSON record.
"""
