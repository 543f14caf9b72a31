#!/usr/bin/env node
'use strict';
// A minimal kernel driven by JSON lines: node bin/kernel.js --servers URL [--managed m.h,...] [--user U --pass P]
// stdin:  {"id": 1, "op": "intercept", "stage": "tool.call", "payload": {...}, "ctx": {...}}
//         {"id": 2, "op": "wait", "stage": "tool.call", "handlers": ["m.h", ...], "timeout": 10}
// stdout: {"ready": true} once the registry is loaded, then one line per request: {"id": 1, "result": ...} or {"id": 1, "error": "..."}

const readline = require('node:readline');
const { parseArgs } = require('node:util');
const { Kernel } = require('../lib/kernel');

const { values } = parseArgs({ options: {
  servers: { type: 'string', default: 'nats://127.0.0.1:4222' },
  managed: { type: 'string', default: '' },
  user: { type: 'string' },
  pass: { type: 'string' },
} });

const write = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

async function answer(kernel, line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (err) {
    return write({ id: null, error: `not JSON: ${err.message}` });
  }
  const { id, op } = request;
  try {
    if (op === 'intercept') return write({ id, result: await kernel.intercept(request.stage, request.payload ?? {}, request.ctx ?? {}) });
    if (op === 'wait') {
      const want = JSON.stringify(request.handlers);
      await kernel.waitUntil(() => JSON.stringify(kernel.runnable(request.stage)) === want, (request.timeout ?? 10) * 1000);
      return write({ id, result: kernel.runnable(request.stage) });
    }
    return write({ id, error: `unknown op ${JSON.stringify(op)}` });
  } catch (err) {
    return write({ id, error: String(err.message || err) });
  }
}

async function main() {
  const kernel = new Kernel({ managed: values.managed.split(',').filter(Boolean) });
  await kernel.start(values.servers.split(','), { user: values.user, pass: values.pass });
  write({ ready: true });
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', (line) => { answer(kernel, line); });
  lines.on('close', async () => {
    await kernel.stop();
    process.exit(0);
  });
}

main().catch((err) => {
  process.stderr.write(`kernel failed: ${err.stack || err}\n`);
  process.exit(1);
});
