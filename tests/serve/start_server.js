// Starts `fathom serve --port 0 ARGS...` (ARGS may name the port instead) and resolves to { proc, port } once it prints the
// address it listens on (rejects if it exits first or takes over two minutes). Shared by the
// server tests and bench/serve_load.js, with `checker()`: named checks that print
// "ok   NAME" or "FAIL NAME: error" and count the failures.
'use strict';
const { spawn } = require('child_process');

// `fathom SUBCOMMAND ARGS...` (serve or router), resolved once it prints its address.
function startListening(fathom, subcommand, args, what) {
  return new Promise((resolve, reject) => {
    const port = args.includes('--port') ? [] : ['--port', '0'];  // a restart keeps its port
    const proc = spawn(fathom, [subcommand, ...port, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve({ proc, port: Number(m[1]) });
    });
    proc.on('exit', (code) => reject(new Error(what + ' exited ' + code + ': ' + out)));
    setTimeout(() => reject(new Error(what + ' did not start: ' + out)), 120000);
  });
}

function startServer(fathom, args) {
  return startListening(fathom, 'serve', args, 'server');
}

// `fathom router --port 0 ARGS...`, probing its replicas every 0.2 s.
function startRouter(fathom, args) {
  return startListening(fathom, 'router', ['--probe-interval', '0.2', ...args], 'router');
}

function checker() {
  const t = { failures: 0 };
  t.check = async (name, fn) => {
    try {
      await fn();
      console.log('ok   ' + name);
    } catch (e) {
      t.failures++;
      console.log('FAIL ' + name + ': ' + (e && e.stack || e));
    }
  };
  return t;
}

// A fixed pseudo-random prompt of `length` token ids below 128,000 (xorshift32 from `seed`; the
// demo model's vocabulary is 129,280).
function randomPrompt(seed, length) {
  const p = [];
  for (let i = 0, s = seed; i < length; i++) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    p.push(s % 128000);
  }
  return p;
}

// A server's /metrics text, and one sample of it (`name` with its labels, as printed): NaN when
// absent.
async function metrics(port) {
  return (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
}
function metric(text, name) {
  const m = text.match(new RegExp('^' + name.replace(/[{}"=.+]/g, (c) => '\\' + c) + ' (\\S+)$', 'm'));
  return m ? Number(m[1]) : NaN;
}

// Resolves once `fn` (async) returns a truthy value, asking every 50 ms; rejects after `ms`,
// naming `what` and the last error `fn` threw.
async function waitFor(fn, what, ms = 30000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn().catch((e) => e);
    if (last && !(last instanceof Error)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('timed out waiting for ' + what + (last instanceof Error ? ': ' + last.message : ''));
}

module.exports = { startServer, startRouter, checker, randomPrompt, metrics, metric, waitFor };
