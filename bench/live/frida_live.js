// Frida anchor of bench/live: count the calls of a given set of functions of a running process.
//
// live.py prepends `const MODE = "js" | "cmodule"; const FN_NAMES = [...];` and loads this into a
// session made with frida.attach(pid). Functions are found by name among the main executable's
// symbols (Module.enumerateSymbols, as bench/anchors/frida_count.js does); each gets
// Interceptor.attach with
//   js       a JavaScript onEnter incrementing a per-function counter (the usual way to use Frida)
//   cmodule  one native onEnter compiled by Frida's TinyCC (CModule), the function's index as data
// The probes are live when script.load() returns. RPC: info() -> {found, attached, refused}, counts()
// -> {total, min, max} over the attached functions.
/* global MODE, FN_NAMES */
const want = new Set(FN_NAMES);
const seen = new Set();
const targets = Process.mainModule.enumerateSymbols()
  .filter(s => s.type === 'function' && want.has(s.name) && !s.address.isNull() && !seen.has(s.name) && seen.add(s.name));
const refused = {};
let readCount;

if (MODE === 'cmodule') {
  const counters = Memory.alloc(8 * Math.max(1, targets.length));
  const cm = new CModule(`
#include <gum/guminterceptor.h>
extern volatile unsigned long long counters[];
void on_enter(GumInvocationContext *ic) { counters[GUM_IC_GET_FUNC_DATA(ic, gsize)]++; }
`, { counters });
  targets.forEach((f, i) => {
    try { Interceptor.attach(f.address, cm.on_enter, ptr(i)); } catch (e) { refused[f.name] = String(e.message || e); }
  });
  readCount = i => counters.add(8 * i).readU64().toNumber();
  globalThis.keepAlive = cm;
} else {
  const counts = new Array(targets.length).fill(0);
  targets.forEach((f, i) => {
    try { Interceptor.attach(f.address, { onEnter() { counts[i]++; } }); } catch (e) { refused[f.name] = String(e.message || e); }
  });
  readCount = i => counts[i];
}

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
