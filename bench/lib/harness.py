"""Benchmark harness for lopi: interleaved runs, in-program timers, Markdown tables.

Standard library only. The method is the one of the anchor measurements
(shared/reference/anchor-measurements.md):

* every variant of one workload is run interleaved round-robin, the order rotated each round,
  after one unrecorded warm-up round;
* the metric is the workload's own timer (hot section only), parsed from its output, so start-up,
  instrumentation set-up and writing of data at exit are excluded; the whole-process wall-clock
  time is kept too, for the notes;
* tables show median and [min-max] of the recorded runs, the ratio of medians to the baseline and
  the per-call overhead (median_variant - median_baseline) / calls.

Every benchmark does `import harness as h` and uses `h.NAME`: this module is that one name space.
The code lives beside it, one module per job, each importing what it needs from the others
(never from here, so that they do not import each other in a circle):

* runs.py: Variant, RunResult, run_interleaved (the rounds), the metric readers, log;
* figures.py: the runs' statistics and the notes on them, time and size formats, Markdown tables;
* machine.py: facts on the machine and the tools' versions;
* builds.py: cached gcc builds, the W1/W2 workloads (flags, timers, output checks), common options;
* lopi_steps.py: lopi's rewrite/report steps and the previous build of `bench/run.sh --against`;
* anchor_runs.py: uftrace, the gcc -finstrument-functions hooks, the floor runner;
* result_files.py: the results' files (Markdown, .runs.json, .summary.json), workload kinds and tool names.
"""

from __future__ import annotations

from anchor_runs import (COUNT_HOOK_RX, TIMING_HOOK_RX, UFT_ROW, count_hook_after, dir_bytes, floor_values,
                         run_floor, timing_hook_after, timing_hook_before, uftrace_hooks, uftrace_report,
                         uftrace_variant)
from builds import (BUILD_CACHE, HOT_NS, TOTAL, W1_FLAGS, W1_SRC, W2_FLAGS, add_size_args, build, build_parallel,
                    cached_output, gcc_version, sqlite_source_line, sqlite_sources, w1_check, w1_expected,
                    w1_groups, w2_check, w2_job)
from figures import (Stats, after_errors, entry_cells, failure_note, fmt_bytes, fmt_int, fmt_ns, fmt_range,
                     fmt_time, markdown_table, median_calls, output_mismatch, results_head, stats)
from lopi_steps import (AGAINST_HEAD, PREV, against_rows, find_lopi, lopi_data_hooks, lopi_report,
                        lopi_report_notes, lopi_rewrite, previous_build, rewrite_configs, rewrite_note,
                        rewrite_or_skip, rewrite_previous)
from machine import (_cmd, cpu_model, git_commit, load_and_time, loadavg, machine_info, machine_lines,
                     tool_version, which)
from result_files import KIND, TOOL, dump_raw, summary_entries, summary_entry, write_results, write_summary
from runs import REPO, WALL, RunResult, Variant, compose_hooks, log, regex_seconds, run_interleaved

__all__ = [
    "COUNT_HOOK_RX", "TIMING_HOOK_RX", "UFT_ROW", "count_hook_after", "dir_bytes", "floor_values", "run_floor",
    "timing_hook_after", "timing_hook_before", "uftrace_hooks", "uftrace_report", "uftrace_variant",
    "BUILD_CACHE", "HOT_NS", "TOTAL", "W1_FLAGS", "W1_SRC", "W2_FLAGS", "add_size_args", "build", "build_parallel",
    "cached_output", "gcc_version", "sqlite_source_line", "sqlite_sources", "w1_check", "w1_expected",
    "w1_groups", "w2_check", "w2_job",
    "Stats", "after_errors", "entry_cells", "failure_note", "fmt_bytes", "fmt_int", "fmt_ns", "fmt_range",
    "fmt_time", "markdown_table", "median_calls", "output_mismatch", "results_head", "stats",
    "AGAINST_HEAD", "PREV", "against_rows", "find_lopi", "lopi_data_hooks", "lopi_report",
    "lopi_report_notes", "lopi_rewrite", "previous_build", "rewrite_configs", "rewrite_note",
    "rewrite_or_skip", "rewrite_previous",
    "_cmd", "cpu_model", "git_commit", "load_and_time", "loadavg", "machine_info", "machine_lines",
    "tool_version", "which",
    "KIND", "TOOL", "dump_raw", "summary_entries", "summary_entry", "write_results", "write_summary",
    "REPO", "WALL", "RunResult", "Variant", "compose_hooks", "log", "regex_seconds", "run_interleaved",
]
