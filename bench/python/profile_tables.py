"""bench/python's tables: the costs, the top five functions by inclusive time and the call counts
of one workload's runs (profile_bench.py runs them), and the method."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Optional

import harness as h

NATIVE, CPROFILE, LOPI, LOPI_CALLS = "native", "cprofile", "lopi", "lopi-calls"
LABEL = {NATIVE: "python3.11 (native)", CPROFILE: "python3.11 -m cProfile -o FILE",
         LOPI: "lopi pyprofile (199 Hz)", LOPI_CALLS: "lopi pyprofile --calls (199 Hz)"}
SHORT = {CPROFILE: "cProfile", LOPI: "lopi", LOPI_CALLS: "lopi --calls"}
TIED = ("<module>", "main")  # both take the whole run: their order is a tie
GENERATOR_NOTE = ("generator: both count every resumption (cProfile a call event, lopi a function__return, "
                  "which python3.11 fires at every yield as well as at the return)")


@dataclasses.dataclass
class WorkloadView:
    key: str
    title: str
    script: Path
    variants: list[h.Variant]
    res: dict[str, list[h.RunResult]]
    truth: Optional[dict[str, float]]  # function name -> % without a profiler
    truth_label: str
    generators: set[int]  # first lines
    call_heavy: bool  # its cost per call means something (not for a few calls in long loops)

    def recorded(self, cfg: str) -> list[h.RunResult]:
        return [r for r in self.res.get(cfg, []) if r.ok and r.round >= 0]

    def skip_reason(self, cfg: str) -> str:
        return next((v.skip_reason for v in self.variants if v.name == cfg), "")


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def ranked(shares: dict[str, float]) -> list[str]:
    return sorted(shares, key=lambda k: (-shares[k], k))


def name_of(key: str) -> str:
    return key.rsplit(":", 1)[0]


def rest(keys: list[str]) -> list[str]:
    """The top five without the two that tie at the whole run."""
    return [k for k in keys if name_of(k) not in TIED]


def cprofile_shares(runs: list[h.RunResult]) -> dict[str, float]:
    """Cumulative time of the workload's functions, % of the profile's total, the runs summed."""
    total = sum(r.extra["cprofile"]["total_s"] for r in runs)
    ct: dict[str, float] = {}
    for r in runs:
        for k, f in r.extra["cprofile"]["functions"].items():
            ct[k] = ct.get(k, 0.0) + f["ct"]
    return {k: pct(v, total) for k, v in ct.items()}


def lopi_shares(runs: list[h.RunResult]) -> dict[str, float]:
    """Inclusive samples of the workload's functions, % of all samples, the runs summed."""
    total = sum(r.extra["lopi"]["samples"] for r in runs)
    incl: dict[str, int] = {}
    for r in runs:
        for k, f in r.extra["lopi"]["functions"].items():
            incl[k] = incl.get(k, 0) + f["incl"]
    return {k: pct(v, total) for k, v in incl.items()}


def shares_of(view: WorkloadView, cfg: str, runs: Optional[list[h.RunResult]] = None) -> dict[str, float]:
    runs = view.recorded(cfg) if runs is None else runs
    if not runs:
        return {}
    return cprofile_shares(runs) if cfg == CPROFILE else lopi_shares(runs)


def display_names(view: WorkloadView) -> dict[str, str]:
    """key -> lopi's qualname (Node.weight), else cProfile's name (weight)."""
    names: dict[str, str] = {}
    for cfg, tool in ((CPROFILE, "cprofile"), (LOPI_CALLS, "lopi"), (LOPI, "lopi")):
        for r in view.recorded(cfg):
            names.update({k: f["name"] for k, f in r.extra[tool]["functions"].items()})
    return names


# ---- costs -------------------------------------------------------------------------------------

def fmt_share(added: float, of: float) -> str:
    if of <= 0:
        return "-"
    if added <= 0:
        return "≤0%"
    return f"{100 * added / of:.1f}%"


def round_ratios(view: WorkloadView, cfg: str) -> list[float]:
    base = {r.round: r.metric_s for r in view.recorded(NATIVE)}
    return [r.metric_s / base[r.round] for r in view.recorded(cfg) if r.round in base]


def file_calls(view: WorkloadView) -> Optional[int]:
    """Calls of the workload file's functions in a run (cProfile's ncalls summed; the median of its
    runs), for the cost per call."""
    counts = [sum(f["nc"] for f in r.extra["cprofile"]["functions"].values()) for r in view.recorded(CPROFILE)]
    return int(statistics.median(counts)) if counts else None


def cost_rows(view: WorkloadView) -> tuple[list[list[str]], dict]:
    """The cost table's rows and {config: figures} for the summary."""
    base = h.stats(view.res[NATIVE])
    base_wall = statistics.median(r.wall_s for r in view.recorded(NATIVE)) if base else None
    cp = h.stats(view.res.get(CPROFILE, []))
    cp_wall = statistics.median(r.wall_s for r in view.recorded(CPROFILE)) if cp else None
    calls = file_calls(view)
    rows, figs = [], {}
    for cfg in (NATIVE, CPROFILE, LOPI, LOPI_CALLS):
        runs = view.res.get(cfg, [])
        st = h.stats(runs)
        notes = [n for n in [view.skip_reason(cfg), h.failure_note(runs), *h.after_errors(runs),
                             h.output_mismatch(program_check(view), view.res[NATIVE], view.recorded(cfg))] if n]
        if not st or not base:
            rows.append([LABEL[cfg], *["-"] * 9, "; ".join(notes)])
            continue
        ok = view.recorded(cfg)
        walls = [r.wall_s for r in ok]
        wall_st = h.Stats(len(walls), statistics.median(walls), min(walls), max(walls), statistics.median(walls))
        outside = statistics.median(r.wall_s - r.metric_s for r in ok)
        fig = {"cpu": st.median / base.median, "wall": wall_st.median / base_wall}
        ratio = rr = wall_ratio = share = per_call = samples = "-"
        if cfg != NATIVE:
            ratio, wall_ratio = f"x{fig['cpu']:.2f}", f"x{fig['wall']:.2f}"
            rrs = round_ratios(view, cfg)
            rr = f"{statistics.median(rrs):.2f} [{min(rrs):.2f}–{max(rrs):.2f}]" if rrs else "-"
            if st.lo <= base.hi:
                notes.append("within native's run-to-run spread (in-program)")
        if cfg in (LOPI, LOPI_CALLS) and cp:
            fig["share_cpu"] = (st.median - base.median) / (cp.median - base.median) if cp.median > base.median else None
            fig["share_wall"] = ((wall_st.median - base_wall) / (cp_wall - base_wall)) if cp_wall > base_wall else None
            share = (f"{fmt_share(st.median - base.median, cp.median - base.median)} / "
                     f"{fmt_share(wall_st.median - base_wall, cp_wall - base_wall)}")
        if cfg in (CPROFILE, LOPI_CALLS) and calls and view.call_heavy:
            fig["ns_per_call"] = (st.median - base.median) / calls * 1e9
            per_call = h.fmt_ns(fig["ns_per_call"])
        if cfg in (LOPI, LOPI_CALLS):
            lp = [r.extra["lopi"] for r in ok]
            samples = f"{statistics.median(x['samples'] for x in lp):.0f}"
            missed = statistics.median(x["not_taken"] for x in lp)
            if missed:
                samples += f" (+{missed:.0f} not taken: inside lopi's probe)"
                notes.append("samples that land inside the function__return probe are not taken (lopi says how "
                             "many); the probe's cost still shows in the shares, as cProfile's does in cProfile's "
                             "(the functions that make the most calls weigh more)")
        if cfg == CPROFILE:
            all_calls = statistics.median(r.extra["cprofile"]["all_calls"] for r in ok)
            notes.append(f"it saw {all_calls:,.0f} calls, builtins' included")
            if not view.call_heavy:
                notes.append("its cost here is not its calls': python3.11 runs its loops slower whenever a profile "
                             "function is set (its tracing mode runs instructions unspecialised)")
        notes.append(f"n={st.n}")
        figs[cfg] = fig
        rows.append([LABEL[cfg], h.fmt_range(st), ratio, rr, h.fmt_range(wall_st), wall_ratio, h.fmt_time(outside),
                     share, per_call, samples, "; ".join(notes)])
    return rows, figs


def program_check(view: WorkloadView):
    return next((v.check for v in view.variants if v.name == NATIVE), None)


def cost_section(view: WorkloadView) -> tuple[list[str], dict]:
    rows, figs = cost_rows(view)
    calls = file_calls(view) if view.call_heavy else None
    header = ["configuration", "in-program CPU time: median [min–max]", "x native (medians)",
              "x native, round by round: median [min–max]", "wall time: median [min–max]", "x native (medians)",
              "wall − in-program (median)", "added time, % of cProfile's: in-program / wall",
              f"ns added per call ({calls:,} calls of the file's functions)" if calls
              else "ns added per call (few calls: not a cost per call)",
              "samples (median)", "notes"]
    return [h.markdown_table(header, rows)], figs


# ---- top five ----------------------------------------------------------------------------------

def top5_section(view: WorkloadView) -> tuple[list[str], dict]:
    tools = [cfg for cfg in (CPROFILE, LOPI, LOPI_CALLS) if view.recorded(cfg)]
    shares = {cfg: shares_of(view, cfg) for cfg in tools}
    ranks = {cfg: ranked(s) for cfg, s in shares.items()}
    names = display_names(view)
    if CPROFILE not in ranks:
        return ["cProfile has no recorded run: nothing to compare with."], {}
    want = ranks[CPROFILE][:5]
    shown = list(dict.fromkeys([k for cfg in tools for k in ranks[cfg][:6]]))
    shown.sort(key=lambda k: (ranks[CPROFILE].index(k) if k in ranks[CPROFILE] else 99, k))
    header = ["function (first line)"]
    for cfg in tools:
        header += [f"{SHORT[cfg]}: {'cumulative time, % of its total' if cfg == CPROFILE else 'inclusive samples, %'}",
                   "rank"]
    header.append(f"without a profiler: {view.truth_label}")
    rows = []
    for k in shown:
        row = [f"{names.get(k, name_of(k))} ({k.rsplit(':', 1)[1]})"]
        for cfg in tools:
            r = ranks[cfg].index(k) + 1 if k in ranks[cfg] else None
            row += [f"{shares[cfg].get(k, 0.0):.1f}", "-" if r is None else (f"**{r}**" if r <= 5 else str(r))]
        truth = (view.truth or {}).get(name_of(k))
        row.append("-" if truth is None else f"{truth:.1f}")
        rows.append(row)
    lines = [h.markdown_table(header, rows), "",
             f"Ranks: bold = in the tool's top five. Each tool's runs summed ({len(view.recorded(CPROFILE))} of "
             "cProfile's, lopi's likewise); `<module>` and `main` take the whole run in every tool, their order is "
             "a tie.", ""]
    verdict = {"want": [names.get(k, k) for k in want]}
    order = " > ".join(names.get(k, name_of(k)) for k in rest(want))
    lines.append(f"- cProfile's top five: {', '.join(names.get(k, name_of(k)) for k in want)}; below `<module>` "
                 f"and `main`: {order}.")
    per_run = [set(ranked(shares_of(view, CPROFILE, [r]))[:5]) == set(want) for r in view.recorded(CPROFILE)]
    lines.append(f"- cProfile's own runs: the same five in {sum(per_run)} of {len(per_run)}.")
    for cfg in (LOPI, LOPI_CALLS):
        if cfg not in ranks:
            lines.append(f"- {LABEL[cfg]}: no recorded run ({view.skip_reason(cfg) or 'failed'}).")
            continue
        got = ranks[cfg][:5]
        runs = [ranked(shares_of(view, cfg, [r]))[:5] for r in view.recorded(cfg)]
        same_set = sum(set(g) == set(want) for g in runs)
        same_order = sum(set(g) == set(want) and rest(g) == rest(want) for g in runs)
        set_ok, order_ok = set(got) == set(want), rest(got) == rest(want)
        verdict[cfg] = {"set": set_ok, "order": order_ok, "runs_set": same_set, "runs_order": same_order,
                        "runs": len(runs)}
        what = "the same five functions" if set_ok else (
            f"DIFFERENT: {', '.join(names.get(k, name_of(k)) for k in got)} "
            f"(missing {', '.join(names.get(k, name_of(k)) for k in want if k not in got)})")
        lines.append(f"- {LABEL[cfg]}, runs summed: {what}; order below `<module>` and `main`: "
                     + ("the same" if order_ok else " > ".join(names.get(k, name_of(k)) for k in rest(got)))
                     + f". Run by run: the same five in {same_set} of {len(runs)}, in the same order too in "
                     f"{same_order} of {len(runs)}.")
    return lines, verdict


# ---- calls -------------------------------------------------------------------------------------

def calls_section(view: WorkloadView) -> tuple[list[str], dict]:
    cp_runs, lp_runs = view.recorded(CPROFILE), view.recorded(LOPI_CALLS)
    if not cp_runs or not lp_runs:
        why = view.skip_reason(LOPI_CALLS) or "a configuration has no recorded run"
        return [f"Not compared: {why}."], {}
    names = display_names(view)
    cp = [r.extra["cprofile"]["functions"] for r in cp_runs]
    lp = [r.extra["lopi"]["functions"] for r in lp_runs]
    keys = sorted(set().union(*cp, *lp), key=lambda k: (int(k.rsplit(":", 1)[1]), k))
    rows, equal, differ = [], 0, []
    for k in keys:
        line = int(k.rsplit(":", 1)[1])
        cps = {(f[k]["nc"], f[k]["cc"]) if k in f else None for f in cp}
        lps = {f[k]["calls"] if k in f else None for f in lp}
        c = cp[-1].get(k)
        l_calls = lp[-1].get(k, {}).get("calls")
        c_text = "-" if c is None else (f"{c['nc']:,}/{c['cc']:,}" if c["nc"] != c["cc"] else f"{c['nc']:,}")
        notes = []
        if len(cps) > 1:
            notes.append("cProfile's count varies between runs: " + ", ".join(sorted(str(x) for x in cps)))
        if len(lps) > 1:
            notes.append("lopi's count varies between runs: " + ", ".join(sorted(str(x) for x in lps)))
        same = c is not None and l_calls == c["nc"] and len(cps) == 1 and len(lps) == 1
        if same:
            equal += 1
            verdict = "equal"
        else:
            differ.append(names.get(k, name_of(k)))
            verdict = "**DIFFERS**" + ("" if c is None or l_calls is None else f" ({l_calls - c['nc']:+,})")
        if line in view.generators:
            notes.append(GENERATOR_NOTE)
        rows.append([names.get(k, name_of(k)), str(line), c_text, "-" if l_calls is None else f"{l_calls:,}",
                     verdict, "; ".join(notes)])
    header = ["function", "first line", "cProfile ncalls (total/primitive where recursive)", "lopi --calls",
              "verdict", "notes"]
    lines = [h.markdown_table(header, rows), "",
             f"{len(keys)} functions of the file (every one either tool saw; class bodies count as a call): "
             f"{equal} equal in every run of both, {len(differ)} differ" + (f" ({', '.join(differ)})." if differ else ".")]
    return lines, {"functions": len(keys), "equal": equal, "differ": differ}


# ---- the page ----------------------------------------------------------------------------------

def workload_section(view: WorkloadView) -> tuple[list[str], dict]:
    cost, figs = cost_section(view)
    top, top_verdict = top5_section(view)
    calls, calls_verdict = calls_section(view)
    lines = ["", f"## {view.title}", "", "### Cost", "", *cost, "", "### Top five functions by inclusive time",
             "", *top, "", "### Calls: lopi --calls next to cProfile's ncalls", "", *calls]
    return lines, {"figs": figs, "top": top_verdict, "calls": calls_verdict}


def short_line(view: WorkloadView, summary: dict) -> str:
    figs, top, calls = summary["figs"], summary["top"], summary["calls"]
    parts = []
    for cfg in (LOPI, LOPI_CALLS):
        v = top.get(cfg)
        if v:
            parts.append(f"{SHORT[cfg]}: {'the same' if v['set'] else 'NOT the same'} five as cProfile "
                         f"(runs summed; {v['runs_set']} of {v['runs']} runs alone), order below main "
                         f"{'the same' if v['order'] else 'different'}")
    cost = []
    for cfg in (CPROFILE, LOPI, LOPI_CALLS):
        f = figs.get(cfg)
        if not f:
            continue
        text = f"{SHORT[cfg]} x{f['cpu']:.2f} in-program, x{f['wall']:.2f} wall"
        if cfg != CPROFILE and f.get("share_cpu") is not None:
            text += f" (added time {max(0.0, 100 * f['share_cpu']):.0f}% of cProfile's in-program"
            text += f", {max(0.0, 100 * f['share_wall']):.0f}% wall)" if f.get("share_wall") is not None else ")"
        if "ns_per_call" in f and cfg != LOPI:
            text += f", {h.fmt_ns(f['ns_per_call'])} ns per call"
        cost.append(text)
    line = f"- **{view.title}**: top five: {'; '.join(parts) or 'not compared'}. Cost: {'; '.join(cost)}."
    if calls:
        line += (f" Calls: {calls['equal']} of {calls['functions']} functions equal to cProfile's ncalls"
                 + (f"; differ: {', '.join(calls['differ'])}." if calls["differ"] else "."))
    return line


def conclusion(summaries: list[tuple[WorkloadView, dict]]) -> str:
    """The answer to issue 31's criterion, in two sentences, with the numbers."""
    same, agree, cost, cheaper, counts, per_call = [], [], [], [], [], []
    for view, s in summaries:
        top, figs, calls = s["top"].get(LOPI), s["figs"], s["calls"]
        if top:
            same.append(top["set"])
            agree.append(f"{view.key} {top['runs_set']} of {top['runs']}")
        lp, cp, lc = figs.get(LOPI), figs.get(CPROFILE), figs.get(LOPI_CALLS)
        if lp and cp:
            share = lp.get("share_cpu")
            cheaper.append(share is not None and share < 1)
            cost.append(f"{view.key}: lopi x{lp['cpu']:.2f} of native's in-program CPU time, cProfile x{cp['cpu']:.2f} "
                        f"(lopi's added time {max(0.0, 100 * (share or 0)):.0f}% of cProfile's); wall time x{lp['wall']:.2f} "
                        f"against x{cp['wall']:.2f}, lopi's start-up and exit included")
        if calls:
            counts.append(f"{calls['equal']} of {calls['functions']} functions' counts equal cProfile's on {view.key}")
        if lc and cp and "ns_per_call" in lc and "ns_per_call" in cp:
            per_call.append(f"{h.fmt_ns(lc['ns_per_call'])} ns per call against cProfile's "
                            f"{h.fmt_ns(cp['ns_per_call'])} on {view.key} (x{lc['cpu']:.1f} native, cProfile "
                            f"x{cp['cpu']:.2f})")
    if not same:
        return "**Conclusion:** lopi pyprofile did not run: nothing to compare."
    where = "both workloads" if all(same) and len(same) == 2 else f"{sum(same)} of {len(same)} workloads"
    price = "at a fraction of cProfile's cost" if cheaper and all(cheaper) else "NOT at a fraction of cProfile's cost"
    text = (f"**Conclusion:** lopi pyprofile (199 Hz) names the same top five Python functions by inclusive time "
            f"as cProfile on {where} (each tool's runs summed; each run alone: {', '.join(agree)}), {price} in the "
            f"program: {'; '.join(cost)}.")
    if counts:
        text += f" With --calls the counts are exact ({'; '.join(counts)})"
        text += f", but cost {'; '.join(per_call)}." if per_call else "."
    return text


def method(n: int, hz: int, python: str) -> list[str]:
    return [
        f"- Interpreter: Debian's `{python}` in every configuration (lopi pyprofile reads its structures; "
        "`python3.11` on PATH may be another build). Workloads: [profile_work.py](../../fixtures/python/profile_work.py) "
        "(few calls, long loops; shares by design: parse 65%, tokenize 45%, render 22%, classify 15%, checksum 8%), "
        "run by [timed.py](../python/timed.py), which runs it as `__main__` and prints its CPU time, and "
        "[calls_work.py](../python/calls_work.py) (~8,800 Python calls per round: recursive fib, a tree walked "
        "with a method at its leaves, a generator pipeline, a class hierarchy), which prints its main part's CPU "
        "time and each of main's four calls' (their inclusive time without a profiler).",
        f"- Configurations: the program alone (native); `{python} -m cProfile -o FILE`; `lopi pyprofile --hz {hz} "
        f"--format json -o FILE -- {python}` (each thread sampled at {hz} Hz of its CPU time, the sample's "
        "Python frames read from the interpreter); the same with `--calls` (python3.11's `function__return` "
        "marker counts each function's returns). Interleaved round-robin, the order rotated each round, after "
        f"one unrecorded warm-up round; n={n}; medians.",
        "- Cost: *in-program* = the CPU time of the workload's main part (`time.process_time()`, all its "
        "threads, a profiler's work in the process included), which leaves out the interpreter's start-up, "
        "lopi's set-up and both tools' writing of their data at exit; *wall* = the whole command, those "
        "included. x native = median / native's median; round by round = each run / native's run in the "
        "same round. *Added time, % of cProfile's* = (lopi − native) / (cProfile − native), medians: "
        "the fraction of cProfile's cost. ns added per call = (median − native's median) / the calls of "
        "the file's functions (cProfile's count).",
        "- Top five: the workload file's functions ranked by cProfile's cumulative time (`ct`, recursion "
        "counted once) and by lopi's inclusive samples (a sample counts once for each function on its "
        "stack), each tool's recorded runs summed, then each run alone; compared as sets (`<module>` and "
        "`main` take the whole run: a tie), with the order of the other three beside. Functions are matched "
        "by their code object's first line and name (cProfile names `weight`, lopi `Node.weight`).",
        "- Calls: for every function of the workload's file either tool saw, lopi --calls' count against "
        "cProfile's ncalls (its total: `total/primitive` for recursive functions), in every recorded run.",
    ]
