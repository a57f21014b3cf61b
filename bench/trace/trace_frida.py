"""The hist script under Frida: `trace.py frida-hist --fn F [--counts FILE] -- PROG ARGS` spawns
PROG with an Interceptor on F (CModule onEnter/onLeave) and reads the histogram at exit()."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path


# `@h = hist(elapsed)` on F: the entry time in the invocation's own data, a log2 histogram (bucket
# b holds [2^(b-1), 2^b), bucket 0 the zeros, as bpftrace's and lopi's hist) read at exit().
FRIDA_HIST_JS = r"""
const hist = Memory.alloc(8 * 65);
const cm = new CModule(`
#include <gum/guminterceptor.h>
struct ts { long sec; long nsec; };
extern int clock_gettime (int clock, struct ts * t);
extern volatile unsigned long long hist[];
static unsigned long long now (void) { struct ts t; clock_gettime (1, &t); return t.sec * 1000000000ULL + t.nsec; }
void on_enter (GumInvocationContext * ic) { *GUM_IC_GET_INVOCATION_DATA (ic, unsigned long long) = now (); }
void on_leave (GumInvocationContext * ic) {
  unsigned long long d = now () - *GUM_IC_GET_INVOCATION_DATA (ic, unsigned long long);
  int b = 0;
  while (d != 0) { b++; d >>= 1; }
  hist[b]++;
}
`, { hist, clock_gettime: Module.getGlobalExportByName('clock_gettime') });
rpc.exports = {
  attach(fn) {
    const s = Process.mainModule.enumerateSymbols().find(x => x.type === 'function' && x.name === fn);
    if (!s) return `no function symbol ${fn}`;
    try { Interceptor.attach(s.address, { onEnter: cm.on_enter, onLeave: cm.on_leave }); } catch (e) { return String(e.message || e); }
    return '';
  },
};
Interceptor.attach(Module.getGlobalExportByName('exit'), {
  onEnter(args) {
    const buckets = [];
    for (let i = 0; i < 65; i++) buckets.push(hist.add(8 * i).readU64().toNumber());
    send({ exit_status: args[0].toInt32(), buckets });
    recv('ack', () => {}).wait();
  },
});
"""


def frida_hist(args: list[str]) -> int:
    """Run PROG under Frida with FRIDA_HIST_JS on FN; prints `frida_hist: calls=N` on stderr, the
    buckets to --counts. Exit 125 when Frida cannot spawn, attach or intercept FN (the message says why)."""
    ap = argparse.ArgumentParser(prog="trace.py frida-hist")
    ap.add_argument("--fn", required=True)
    ap.add_argument("--counts", type=Path)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args(args)
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    try:
        import frida
    except ImportError as e:
        print(f"frida_hist: {e}", file=sys.stderr)
        return 125
    done = threading.Event()
    result: dict = {}
    errors: list[str] = []
    try:
        dev = frida.get_local_device()
        pid = dev.spawn(argv, stdio="pipe")
        session = dev.attach(pid)
        script = session.create_script(FRIDA_HIST_JS)
    except Exception as e:  # frida.*Error: not permitted, not supported, ...
        print(f"frida_hist: cannot spawn/attach: {type(e).__name__}: {e}", file=sys.stderr)
        return 125

    def on_message(msg, data):
        if msg["type"] == "error":
            errors.append(msg.get("description", str(msg)))
        elif "exit_status" in msg.get("payload", {}):
            result.update(msg["payload"])
            script.post({"type": "ack"})

    def on_output(p, fd, data):
        if data:
            out = sys.stdout if fd == 1 else sys.stderr
            out.buffer.write(data)
            out.flush()

    script.on("message", on_message)
    dev.on("output", on_output)
    session.on("detached", lambda *_: done.set())
    try:
        script.load()
        why = script.exports_sync.attach(a.fn)
    except Exception as e:
        why = f"script failed to load: {e}"
    if why:
        print(f"frida_hist: {a.fn}: {why}", file=sys.stderr)
        dev.kill(pid)
        return 125
    dev.resume(pid)
    done.wait()
    dev.off("output", on_output)
    for e in errors:
        print(f"frida_hist: script error: {e}", file=sys.stderr)
    if "exit_status" not in result:
        print("frida_hist: the process ended without calling exit() (no histogram)", file=sys.stderr)
        return 1
    print(f"frida_hist: calls={sum(result['buckets'])}", file=sys.stderr)
    if a.counts:
        a.counts.write_text(json.dumps({"buckets": result["buckets"]}))
    return int(result["exit_status"]) & 0xFF
