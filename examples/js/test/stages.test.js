'use strict';
// The stage rules the JS side shares with the Python one: match fields and terminal patches (docs/protocol.md).
const test = require('node:test');
const assert = require('node:assert');
const wire = require('../lib/wire.js');

test('match fields of the agent hook points', () => {
  assert.strictEqual(wire.matchField('llm.retry'), 'model');
  assert.strictEqual(wire.matchField('assistant.message'), 'agent');
  assert.strictEqual(wire.matchField('tool.exec'), 'name');
  assert.strictEqual(wire.matchField('memory.save'), 'key');
});

test('a patch carrying the terminal field ends the chain', () => {
  assert.ok(wire.endsRun('tool.call', { name: 'echo', result: 'cached' }));
  assert.ok(wire.endsRun('llm.request', { model: 'm', result: { content: 'hi' } }));
  assert.ok(wire.endsRun('assistant.message', { content: 'x', rework: 'again' }));
  assert.ok(!wire.endsRun('assistant.message', { content: 'x', answer: 'y' }));
  assert.ok(!wire.endsRun('tool.call', { name: 'echo', result: null }));
  assert.ok(!wire.endsRun('tool.result', { output: 'x', result: 'y' }));
});
