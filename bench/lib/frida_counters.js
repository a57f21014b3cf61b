// Shared by bench/anchors/frida_count.js and bench/live/frida_live.js (the runners prepend it):
// Interceptor.attach on every target with a per-function call counter, in one of two ways:
//   js       an onEnter callback in JavaScript per function (the usual way to use Frida)
//   cmodule  one C callback (CModule, compiled by Frida's TinyCC) that increments the function's
//            counter, passed as native onEnter with the function's index as data (Frida's fast path)
// Returns { refused: {name: Frida's message}, readCount(i) }.
function attachCounters(targets, mode) {
  const refused = {};
  if (mode === 'cmodule') {
    const counters = Memory.alloc(8 * Math.max(1, targets.length));
    const cm = new CModule(`
#include <gum/guminterceptor.h>
extern volatile unsigned long long counters[];
void on_enter(GumInvocationContext *ic) { counters[GUM_IC_GET_FUNC_DATA(ic, gsize)]++; }
`, { counters });
    targets.forEach((f, i) => {
      try { Interceptor.attach(f.address, cm.on_enter, ptr(i)); } catch (e) { refused[f.name] = String(e.message || e); }
    });
    globalThis.keepAlive = cm;
    return { refused, readCount: i => counters.add(8 * i).readU64().toNumber() };
  }
  const counts = new Array(targets.length).fill(0);
  targets.forEach((f, i) => {
    try { Interceptor.attach(f.address, { onEnter() { counts[i]++; } }); } catch (e) { refused[f.name] = String(e.message || e); }
  });
  return { refused, readCount: i => counts[i] };
}
