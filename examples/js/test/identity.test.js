'use strict';
// The identity vectors of tests/vectors (generated from the Python implementation) against lib/identity.js.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { canonical, identity, normalise, version, DeclarationError } = require('../lib/identity');

const VECTORS = path.join(__dirname, '..', '..', '..', 'tests', 'vectors');
const load = (name) => JSON.parse(fs.readFileSync(path.join(VECTORS, `${name}.json`), 'utf8'));

for (const vector of load('identity')) {
  test(`identity: ${vector.what}`, () => {
    assert.equal(canonical(vector.declaration), vector.canonical);
    assert.equal(identity(vector.declaration), vector.identity);
  });
}

for (const vector of load('identity_invalid')) {
  test(`rejected: ${vector.what}`, () => {
    assert.throws(() => normalise(vector.declaration), DeclarationError);
  });
}

for (const vector of load('version')) {
  test(`version: ${vector.what}`, () => {
    assert.deepEqual(vector.declarations.map(identity).sort(), vector.identities);
    assert.equal(version(vector.declarations), vector.version);
  });
}
