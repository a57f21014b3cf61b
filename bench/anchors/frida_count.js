// Frida anchor: count every call of every function of the main executable with Interceptor.attach.
//
// Loaded by frida_count.py, which prepends `const MODE = "js" | "cmodule";` and
// bench/lib/frida_counters.js (the two ways of counting).
// Functions are the symbols of type 'function' with a size in the main module (like `uprobe:BIN:*`);
// those Interceptor refuses (too short to patch, ...) are reported with Frida's message.
// At exit() the counts are sent to the runner, which acknowledges before the process goes on.
/* global MODE, attachCounters */
const mainModule = Process.mainModule;
const fns = mainModule.enumerateSymbols().filter(s => s.type === 'function' && !s.address.isNull() && s.size > 0);
const seen = new Set();
const targets = fns.filter(s => !seen.has(s.address.toString()) && seen.add(s.address.toString()));
const { refused, readCount } = attachCounters(targets, MODE);

Interceptor.attach(Module.getGlobalExportByName('exit'), {
  onEnter(args) {
    const perFn = {};
    targets.forEach((f, i) => { if (!(f.name in refused)) perFn[f.name] = readCount(i); });
    send({ exit_status: args[0].toInt32(), per_fn: perFn, refused, symbols: targets.length });
    recv('ack', () => {}).wait();
  },
});
send({ attached: targets.length - Object.keys(refused).length, symbols: targets.length });
