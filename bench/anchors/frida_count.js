// Frida anchor: count every call of every function of the main executable with Interceptor.attach.
//
// Loaded by frida_count.py, which prepends `const MODE = "js" | "cmodule";`:
//   js       an onEnter callback in JavaScript per function (the usual way to use Frida)
//   cmodule  one C callback (CModule, compiled by Frida's TinyCC) that increments a per-function
//            counter, passed as native onEnter with the function's index as data (Frida's fast path)
// Functions are the symbols of type 'function' with a size in the main module (like `uprobe:BIN:*`);
// those Interceptor refuses (too short to patch, ...) are reported with Frida's message.
// At exit() the counts are sent to the runner, which acknowledges before the process goes on.
/* global MODE */
const mainModule = Process.mainModule;
const fns = mainModule.enumerateSymbols().filter(s => s.type === 'function' && !s.address.isNull() && s.size > 0);
const seen = new Set();
const targets = fns.filter(s => !seen.has(s.address.toString()) && seen.add(s.address.toString()));
const refused = {};
let readCount;

if (MODE === 'cmodule') {
  const counters = Memory.alloc(8 * targets.length);
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

Interceptor.attach(Module.getGlobalExportByName('exit'), {
  onEnter(args) {
    const perFn = {};
    targets.forEach((f, i) => { if (!(f.name in refused)) perFn[f.name] = readCount(i); });
    send({ exit_status: args[0].toInt32(), per_fn: perFn, refused, symbols: targets.length });
    recv('ack', () => {}).wait();
  },
});
send({ attached: targets.length - Object.keys(refused).length, symbols: targets.length });
