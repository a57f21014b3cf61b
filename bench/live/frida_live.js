// Frida anchor of bench/live: count the calls of a given set of functions of a running process.
//
// live.py prepends `const MODE = "js" | "cmodule"; const FN_NAMES = [...];` and loads this into a
// session made with frida.attach(pid). Functions are found by name among the main executable's
// symbols (Module.enumerateSymbols, as bench/anchors/frida_count.js does); each gets a counter
// from bench/lib/frida_counters.js (prepended too): a JavaScript or a CModule onEnter.
// The probes are live when script.load() returns. RPC: info() -> {found, attached, refused}, counts()
// -> {total, min, max} over the attached functions.
/* global MODE, FN_NAMES, attachCounters */
const want = new Set(FN_NAMES);
const seen = new Set();
const targets = Process.mainModule.enumerateSymbols()
  .filter(s => s.type === 'function' && want.has(s.name) && !s.address.isNull() && !seen.has(s.name) && seen.add(s.name));
const { refused, readCount } = attachCounters(targets, MODE);

rpc.exports = {
  info() {
    return { found: targets.length, attached: targets.length - Object.keys(refused).length, refused };
  },
  counts() {
    let total = 0, min = null, max = null;
    targets.forEach((f, i) => {
      if (f.name in refused) return;
      const c = readCount(i);
      total += c;
      min = min === null ? c : Math.min(min, c);
      max = max === null ? c : Math.max(max, c);
    });
    return { total, min, max };
  },
};
