"""The live benchmark's runs summed up per configuration, and its results table."""

from __future__ import annotations

import statistics
from typing import Callable, Optional

import harness as h


def med(vals: list) -> Optional[float]:
    v = [x for x in vals if x is not None]
    return statistics.median(v) if v else None


def rng(vals: list, fmt: Callable[[float], str]) -> str:
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    if len(v) == 1:
        return fmt(v[0])
    return f"{fmt(statistics.median(v))} [{fmt(min(v))}–{fmt(max(v))}]"


def ms(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def secs(x: float) -> str:
    return f"{x:.3g} s" if x < 100 else f"{x:,.0f} s"


def summarize(cfg: dict, runs: list[dict]) -> dict:
    ok = [r for r in runs if r["ok"]]
    s = {"key": cfg["key"], "tool": cfg["tool"], "label": cfg["label"], "functions": cfg["functions_text"],
         "hits_per_iter": cfg["hits"], "n": len(ok), "runs": len(runs)}
    if cfg["skip"]:
        return dict(s, status="skipped", reason=cfg["skip"])
    bad = [r for r in runs if not r["ok"]]
    if bad:
        s["failed"] = bad[0]["error"]
    if not ok:
        return dict(s, status="failed", reason=bad[0]["error"] if bad else "not run")
    s["status"] = "ok"
    for k in ("attach_s", "pause_ms", "stop_ms", "plan_ms", "attach_stall_s", "detach_ms", "detach_s",
              "detach_stall_s", "ns_per_hit", "base_noise_ns", "ns_per_call_base", "rate_base", "rate_live",
              "sites", "calls", "expected_calls"):
        vals = [r.get(k) for r in ok if r.get(k) is not None]
        if vals:
            s[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}
    s["calls_min_values"] = [r["calls_min"] for r in ok if "calls_min" in r]
    s["calls_max_values"] = [r["calls_max"] for r in ok if "calls_max" in r]
    s["code_restored"] = all(r["code_restored"] for r in ok)
    s["code_not_restored_runs"] = sum(not r["code_restored"] for r in ok)
    s["live_bytes_changed"] = med([r.get("live_bytes_changed") for r in ok])
    ratios = [r["calls"] / r["expected_calls"] for r in ok if r.get("expected_calls")]
    if ratios:
        s["counted_over_expected"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    s["waited_threads"] = [r.get("waited_threads") for r in ok if "waited_threads" in r]
    s["detach_errors"] = med([r.get("detach_errors") for r in ok])
    s["refused"] = next((r.get("refused_example") for r in ok if r.get("refused")), None)
    return s


def xfmt(r: float) -> str:
    return f"{r:,.0f}" if r >= 100 else f"{r:.3g}"


def vals(s: dict, k: str, scale: float = 1.0) -> list:
    return [v * scale for v in s[k]["values"]] if k in s else []


def table(summ: list[dict], lopi_ref: Optional[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    header = ["tool", "functions (sites)", "attach: launch → probes live", "pause while attaching, ms",
              "detach, ms", "ns per hit", "per hit x lopi", "calls counted / expected", "code restored",
              "notes"]
    rows, notes_all = [], []
    by_key = {s["key"]: s for s in summ}
    for s in summ:
        if s["status"] != "ok":
            rows.append([s["label"], s["functions"], s["status"], "-", "-", "-", "-", "-", "-", s.get("reason", "")])
            continue
        notes = []
        sites = int(s["sites"]["median"]) if "sites" in s else None
        fn = f"{s['functions']} ({sites:,} sites)" if sites is not None else s["functions"]
        attach = rng(vals(s, "attach_s"), secs)
        if s["tool"] == "lopi":
            pause = (f"{rng(vals(s, 'pause_ms'), ms)} (stop threads {rng(vals(s, 'stop_ms'), ms)}; "
                     f"stall seen {rng(vals(s, 'attach_stall_s', 1e3), ms)})")
            detach = f"{rng(vals(s, 'detach_ms'), ms)} paused (stall seen {rng(vals(s, 'detach_stall_s', 1e3), ms)})"
            if "plan_ms" in s:
                notes.append(f"planned before stopping the process: {rng(vals(s, 'plan_ms'), ms)} ms")
            waited = [w for w in s["waited_threads"] if w]
            if waited:
                notes.append(f"waited for threads inside probes at detach in {len(waited)} of {s['n']} runs")
        elif s["tool"] == "static":
            attach = "- (rewritten file)"
            pause = detach = "-"
            notes.append("the rewritten copy of the workload, each run in a process of its own; ns per hit "
                         "against the original's throughput measured just before")
        else:
            pause = f"none reported (stall seen {rng(vals(s, 'attach_stall_s', 1e3), ms)})"
            detach = (f"{rng(vals(s, 'detach_s', 1e3), ms)} to detach (stall seen "
                      f"{rng(vals(s, 'detach_stall_s', 1e3), ms)})")
        nsh = rng(vals(s, "ns_per_hit"), h.fmt_ns)
        noise = s.get("base_noise_ns", {}).get("median")
        noisy = "ns_per_hit" in s and (s["ns_per_hit"]["median"] <= 0
                                       or (noise is not None and s["ns_per_hit"]["median"] < 2 * noise))
        if noisy:
            notes.append(f"ns per hit within the noise (the process's two baseline windows differ by "
                         f"{h.fmt_ns(noise or 0)} ns per hit)")
        same = by_key.get("lopi-entry-" + ("all" if s["key"].endswith("-all") else "sub"))
        if s["tool"] != "lopi" and same and same["status"] == "ok" and "attach_s" in s:
            attach += f" (x{xfmt(s['attach_s']['median'] / same['attach_s']['median'])} lopi)"
        ratio = "-"
        lopi_sub = s["tool"] == "lopi" and s["key"].endswith("-sub")  # 1% (10%) of the calls: imprecise
        if (lopi_ref and "ns_per_hit" in s and not noisy and not lopi_sub and s["key"] != lopi_ref["key"]
                and lopi_ref["ns_per_hit"]["median"] > 0):
            ratio = f"x{xfmt(s['ns_per_hit']['median'] / lopi_ref['ns_per_hit']['median'])}"
        elif lopi_ref and s["key"] == lopi_ref["key"]:
            ratio = "x1 (reference)"
        if "counted_over_expected" in s:
            c = s["counted_over_expected"]
            counted = (f"{h.fmt_int(int(s['calls']['median']))} / {h.fmt_int(int(s['expected_calls']['median']))} "
                       f"({c['median']:.3f}" + (f", {c['min']:.3f}–{c['max']:.3f})" if s["n"] > 1 else ")"))
        else:
            counted = "-"
        restored = "yes" if s["code_restored"] else f"NO ({s['code_not_restored_runs']} of {s['n']} runs)"
        if s["tool"] == "static":
            restored = "-"
        if s.get("live_bytes_changed") is not None:
            restored += f" ({int(s['live_bytes_changed']):,} bytes differed while live)"
        if s["tool"] == "bpftrace" and "calls" in s:
            notes.append("bpftrace removes its uprobes one by one after SIGINT, and they count until removed: "
                         "expected = iterations from BEGIN to its exit × H, an upper bound (per function "
                         f"{rng([r for r in s['calls_min_values']], h.fmt_int)} to "
                         f"{rng([r for r in s['calls_max_values']], h.fmt_int)} calls)")
        if s.get("detach_errors"):
            notes.append(f"bpftrace printed {int(s['detach_errors']):,} `failed to detach probe` errors "
                         "(no tracefs at /sys/kernel/tracing); the uprobes were removed all the same (code check)")
        if s.get("refused"):
            notes.append(f"Interceptor refused some functions (e.g. `{s['refused'][0]}`: {s['refused'][1]})")
        if "failed" in s:
            notes.append(f"FAILED in {s['runs'] - s['n']} of {s['runs']} runs (figures from the others): {s['failed']}")
        notes.append(f"n={s['n']}")
        rows.append([s["label"], fn, attach, pause, detach, nsh, ratio, counted, restored, "; ".join(notes)])
    return header, rows, notes_all
