#!/usr/bin/env node
'use strict';
// An example module: node bin/module.js --servers nats://127.0.0.1:4222 [--name jsguard] [--user U --pass P]
// Prints one JSON line {"ready": true, ...} once it serves; stops cleanly on SIGTERM, SIGINT or end of stdin.

const { parseArgs } = require('node:util');
const { Module } = require('../lib/module');
const { identity } = require('../lib/identity');

const { values } = parseArgs({ options: {
  servers: { type: 'string', default: 'nats://127.0.0.1:4222' },
  name: { type: 'string', default: 'jsguard' },
  user: { type: 'string' },
  pass: { type: 'string' },
  heartbeat: { type: 'string', default: '1' },
  'detach-on-stop': { type: 'boolean', default: false },
} });

const mod = new Module(values.name, { heartbeat: Number(values.heartbeat) });

// Refuses destructive shell commands; fail-closed, so it keeps guarding tool.call if it dies.
mod.stage('tool.call', 'no_rm', async (stage, payload) => {
  const command = String(payload.input?.command ?? '');
  if (/\brm\s+-[a-z]*r/.test(command)) return { decision: 'cancel', reason: `refused: ${command}` };
  return { decision: 'continue' };
}, { fail_closed: true, match: 'shell', timeout: 2 });

// Runs after no_rm: marks the input it let through.
mod.stage('tool.call', 'tag', async (stage, payload) => {
  return { decision: 'patch', payload: { ...payload, input: { ...payload.input, tagged_by: 'js' } } };
}, { after: 'no_rm', match: ['shell'] });

// A faulty handler on a stage of its own: it raises; declared fail-closed, so the kernel must cancel.
mod.stage('custom.jsfault', 'boom', async () => {
  throw new Error('boom');
}, { fail_closed: true, timeout: 1 });

async function main() {
  const served = await mod.serve(values.servers.split(','), { user: values.user, pass: values.pass, detachOnStop: values['detach-on-stop'] });
  const identities = Object.fromEntries(mod.declarations.map((d) => [`${d.module}.${d.name}`, identity(d)]));
  process.stdout.write(`${JSON.stringify({ ready: true, subject: served.subject, key: served.key, identities })}\n`);
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await served.stop();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.resume();
}

main().catch((err) => {
  process.stderr.write(`module failed: ${err.stack || err}\n`);
  process.exit(1);
});
