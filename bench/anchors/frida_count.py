#!/usr/bin/env python3
"""Run a program under Frida with frida_count.js (every function of the main executable counted).

    frida_count.py [--mode js|cmodule] [--counts FILE] -- PROG ARGS...

The program's stdout and stderr are passed through; its exit status is this script's. At the end,
on stderr: `frida_count: calls=N functions=F attached=A refused=R` (calls = sum over the attached
functions); with --counts, FILE gets {"per_fn": {...}, "refused": {name: Frida's message}}.
Exit 125 when Frida cannot spawn or attach (the message says why).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("js", "cmodule"), default="js")
    ap.add_argument("--counts", type=Path)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        ap.error("no program")
    try:
        import frida
    except ImportError as e:
        print(f"frida_count: {e}", file=sys.stderr)
        return 125

    source = (f"const MODE = {json.dumps(a.mode)};\n" + (HERE.parent / "lib" / "frida_counters.js").read_text()
              + (HERE / "frida_count.js").read_text())
    done = threading.Event()
    result: dict = {}
    errors: list[str] = []
    try:
        dev = frida.get_local_device()
        pid = dev.spawn(argv, stdio="pipe")
        session = dev.attach(pid)
        script = session.create_script(source)
    except Exception as e:  # frida.*Error: not permitted, not supported, ...
        print(f"frida_count: cannot spawn/attach: {type(e).__name__}: {e}", file=sys.stderr)
        return 125

    def on_message(msg, data):
        if msg["type"] == "error":
            errors.append(msg.get("description", str(msg)))
            return
        payload = msg.get("payload", {})
        if "exit_status" in payload:
            result.update(payload)
            script.post({"type": "ack"})

    def on_output(p, fd, data):
        if data:
            out = sys.stdout if fd == 1 else sys.stderr
            out.buffer.write(data)
            out.flush()

    script.on("message", on_message)
    dev.on("output", on_output)
    session.on("detached", lambda *args: done.set())
    try:
        script.load()
    except Exception as e:
        print(f"frida_count: script failed to load: {e}", file=sys.stderr)
        dev.kill(pid)
        return 125
    dev.resume(pid)
    done.wait()
    dev.off("output", on_output)
    for e in errors:
        print(f"frida_count: script error: {e}", file=sys.stderr)
    if "exit_status" not in result:
        print("frida_count: the process ended without calling exit() (no counts)", file=sys.stderr)
        return 1
    per_fn = result["per_fn"]
    refused = result["refused"]
    print(f"frida_count: calls={sum(per_fn.values())} functions={result['symbols']} attached={len(per_fn)} "
          f"refused={len(refused)}", file=sys.stderr)
    if a.counts:
        a.counts.write_text(json.dumps({"per_fn": per_fn, "refused": refused}))
    return int(result["exit_status"]) & 0xFF


if __name__ == "__main__":
    sys.exit(main())
