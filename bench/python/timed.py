"""Runs a Python file as __main__ with its arguments (`timed.py FILE ARGS`) and prints on stderr
the CPU time it took, `cpu_s=S`: the main part's time of a workload that does not print its own
(fixtures/python/profile_work.py, which lopi's tests share and bench/ must not change). The
file's code objects keep its own name, so that profiles name its functions as if it ran alone."""
import runpy
import sys
import time

path = sys.argv[1]
sys.argv = sys.argv[1:]
start = time.process_time()
runpy.run_path(path, run_name="__main__")
print(f"cpu_s={time.process_time() - start:.6f}", file=sys.stderr)
