'use strict';
// The message vectors of tests/vectors (announcements, replies, requests) against lib/kernel.js and lib/wire.js:
// what the Python side accepts, this side accepts; what it refuses, this side refuses.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { parseAnnouncement } = require('../lib/kernel');
const wire = require('../lib/wire');

const VECTORS = path.join(__dirname, '..', '..', '..', 'tests', 'vectors');
const load = (name) => JSON.parse(fs.readFileSync(path.join(VECTORS, `${name}.json`), 'utf8'));

for (const vector of load('announcements')) {
  test(`announcement: ${vector.what}`, () => {
    const data = new TextEncoder().encode(JSON.stringify(vector.announcement));
    if (vector.valid) assert.equal(parseAnnouncement(vector.key, data).instance, vector.announcement.instance);
    else assert.throws(() => parseAnnouncement(vector.key, data));
  });
}

for (const vector of load('replies')) {
  test(`reply: ${vector.what}`, () => {
    const wrong = wire.checkReply(vector.reply);
    if (vector.decision === null) assert.equal(typeof wrong, 'string');
    else assert.equal(wrong, null);
  });
}

for (const vector of load('requests')) {
  test(`request: ${vector.what}`, () => {
    const wrong = wire.checkRequest(vector.request);
    if (vector.valid) assert.equal(wrong, null);
    else assert.equal(typeof wrong, 'string');
  });
}
