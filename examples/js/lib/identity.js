'use strict';
// The handler identity of docs/protocol.md ("Identity"): normalise a wire
// declaration, write its canonical JSON text, hash it with SHA-256.

const crypto = require('node:crypto');

const TOKEN = /^[A-Za-z0-9_-]+$/;
const DEFAULT_TIMEOUT = 2.0;
const MAX_TIMEOUT = 3600.0;
const PRIORITY_LIMIT = 1000000;
// The context fields a `when` may filter on (docs/protocol.md, "Composition").
const WHEN_FIELDS = ['agents', 'users', 'sessions', 'templates'];
// The characters trimmed from names: Python's str.isspace() set (not JavaScript's trim()).
const SPACE = new Set(
  '\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000',
);

class DeclarationError extends Error {}

function trim(text) {
  const chars = Array.from(text);
  let start = 0;
  let end = chars.length;
  while (start < end && SPACE.has(chars[start])) start += 1;
  while (end > start && SPACE.has(chars[end - 1])) end -= 1;
  return chars.slice(start, end).join('');
}

// Sort by Unicode code point: the UTF-8 byte order (UTF-16 order differs above U+FFFF).
function byCodePoint(a, b) {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function distinctSorted(names) {
  return Array.from(new Set(names)).sort(byCodePoint);
}

// fail_closed is a JSON boolean or missing (false): a promise to cancel is never read out of "false".
function failClosed(wire, where) {
  if (!('fail_closed' in wire)) return false;
  if (typeof wire.fail_closed !== 'boolean') {
    throw new DeclarationError(`${where}: fail_closed must be true or false, not ${JSON.stringify(wire.fail_closed)}`);
  }
  return wire.fail_closed;
}

// Python truthiness (what an empty match means: every call).
function truthy(value) {
  if (value === null || value === undefined || value === false || value === 0 || value === '') return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object') return Object.keys(value).length > 0;
  return true;
}

function names(value, split) {
  if (value === null || value === undefined) return [];
  if (typeof value === 'string') {
    const parts = split ? value.split(split) : [value];
    return parts.map(trim).filter((part) => part !== '');
  }
  if (!Array.isArray(value)) throw new DeclarationError(`expected a string or a list of strings, not ${JSON.stringify(value)}`);
  return value.map((part) => {
    if (typeof part !== 'string') throw new DeclarationError(`a name must be a string, not ${JSON.stringify(part)}`);
    return trim(part); // list items are not split, and an empty one is kept
  });
}

function references(module, value, where) {
  const out = names(value, null).map((ref) => {
    const parts = ref.split('.');
    if (parts.length > 2 || !parts.every((part) => TOKEN.test(part))) {
      throw new DeclarationError(`${where}: reference ${JSON.stringify(ref)} is not 'handler' or 'module.handler'`);
    }
    return parts.length === 2 ? ref : `${module}.${ref}`;
  });
  return distinctSorted(out);
}

function matcher(value, where) {
  // null, "", [] (and other empty values) mean every call.
  if (!truthy(value)) return [];
  const out = distinctSorted(names(value, '|'));
  if (out.length === 0) throw new DeclarationError(`${where}: match names no tool`);
  return out;
}

// priority: an integer within the limit; 0 (the default) is left out of the normalised form.
function priority(wire, where) {
  const value = 'priority' in wire ? wire.priority : 0;
  if (typeof value !== 'number' || !Number.isInteger(value) || Math.abs(value) > PRIORITY_LIMIT) {
    throw new DeclarationError(`${where}: priority must be an integer from -${PRIORITY_LIMIT} to ${PRIORITY_LIMIT}, not ${JSON.stringify(value)}`);
  }
  return value;
}

// when: only its filled fields, each a sorted list of distinct patterns; empty or null: left out.
function when(wire, where) {
  const value = wire.when;
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new DeclarationError(`${where}: when must be a mapping`);
  const unknown = Object.keys(value).filter((key) => !WHEN_FIELDS.includes(key));
  if (unknown.length) throw new DeclarationError(`${where}: when has unknown field(s) ${unknown.sort().join(', ')}`);
  const out = {};
  for (const field of WHEN_FIELDS) {
    let raw = value[field];
    if (typeof raw === 'string') raw = [raw];
    if (raw !== null && raw !== undefined && !Array.isArray(raw)) throw new DeclarationError(`${where}: when.${field} must be a list`);
    const patterns = distinctSorted(names(raw, null));
    if (patterns.includes('')) throw new DeclarationError(`${where}: when.${field} holds an empty pattern`);
    if (patterns.length) out[field] = patterns;
  }
  return out;
}

const MAX_PORTS = 32;

// A bag key: dotted tokens; a bare port (one token) is `<handler>.<port>`.
function bagKey(handler, key, where) {
  if (typeof key !== 'string') throw new DeclarationError(`${where}: a bag key must be a string, not ${JSON.stringify(key)}`);
  const trimmed = trim(key);
  const parts = trimmed.split('.');
  if (!trimmed || !parts.every((part) => TOKEN.test(part))) throw new DeclarationError(`${where}: bag key ${JSON.stringify(trimmed)} is not dotted tokens`);
  return parts.length > 1 ? trimmed : `${handler}.${trimmed}`;
}

function outputs(wire, where) {
  const value = wire.outputs;
  if (value === null || value === undefined) return [];
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list)) throw new DeclarationError(`${where}: outputs must be a list of keys`);
  const keys = distinctSorted(list.map((key) => bagKey(wire.name, key, where)));
  if (keys.length > MAX_PORTS) throw new DeclarationError(`${where}: at most ${MAX_PORTS} outputs`);
  return keys;
}

function inputs(wire, where) {
  const value = wire.inputs;
  if (value === null || value === undefined) return [];
  if (!Array.isArray(value)) throw new DeclarationError(`${where}: inputs must be a list`);
  const out = new Map();
  for (let item of value) {
    if (typeof item === 'string') item = { key: item };
    if (item === null || typeof item !== 'object' || Array.isArray(item)) throw new DeclarationError(`${where}: an input must be a key or {key, required, default}`);
    if (Object.keys(item).some((field) => !['key', 'required', 'default'].includes(field))) throw new DeclarationError(`${where}: input has unknown fields`);
    const key = bagKey(wire.name, item.key, where);
    const required = 'required' in item ? item.required : false;
    const fallback = 'default' in item ? item.default : null;
    if (typeof required !== 'boolean') throw new DeclarationError(`${where}: input ${key}: required must be a boolean`);
    if (fallback !== null && typeof fallback !== 'string' && typeof fallback !== 'boolean') throw new DeclarationError(`${where}: input ${key}: bad default`);
    if (out.has(key)) throw new DeclarationError(`${where}: input ${key} declared twice`);
    out.set(key, { key, required, default: fallback });
  }
  if (out.size > MAX_PORTS) throw new DeclarationError(`${where}: at most ${MAX_PORTS} inputs`);
  return Array.from(out.keys()).sort(byCodePoint).map((key) => out.get(key));
}

function validStage(stage) {
  return typeof stage === 'string' && stage !== '' && stage.split('.').every((token) => TOKEN.test(token));
}

// A wire declaration, normalised as a kernel reads it; throws DeclarationError naming what is wrong.
function normalise(wire) {
  if (wire === null || typeof wire !== 'object' || Array.isArray(wire)) throw new DeclarationError('a declaration is an object');
  const { module, name, stage } = wire;
  const where = `${module}.${name}`;
  if (typeof module !== 'string' || !TOKEN.test(module)) throw new DeclarationError(`${where}: the module name must match [A-Za-z0-9_-]+`);
  if (typeof name !== 'string' || !TOKEN.test(name)) throw new DeclarationError(`${where}: the handler name must match [A-Za-z0-9_-]+`);
  if (!validStage(stage)) throw new DeclarationError(`${where}: stage ${JSON.stringify(stage)} is not dotted [A-Za-z0-9_-]+ tokens`);
  let timeout = 'timeout' in wire ? wire.timeout : DEFAULT_TIMEOUT;
  if (typeof timeout !== 'number' || !Number.isFinite(timeout) || !(timeout > 0)) {
    throw new DeclarationError(`${where}: timeout must be a positive number of seconds, not ${JSON.stringify(timeout)}`);
  }
  if (timeout > MAX_TIMEOUT) timeout = MAX_TIMEOUT; // clamped before hashing
  const code = 'code' in wire ? wire.code : ''; // missing: ""; null stays null
  if (code !== null && typeof code !== 'string') throw new DeclarationError(`${where}: code must be a string`);
  const out = {
    module,
    name,
    stage,
    fail_closed: failClosed(wire, where),
    timeout,
    before: references(module, wire.before, where),
    after: references(module, wire.after, where),
    match: matcher(wire.match, where),
    code,
  };
  const rank = priority(wire, where);
  if (rank !== 0) out.priority = rank;
  const scope = when(wire, where);
  if (Object.keys(scope).length) out.when = scope;
  const reads = inputs(wire, where);
  if (reads.length) out.inputs = reads;
  const writes = outputs(wire, where);
  if (writes.length) out.outputs = writes;
  return out;
}

// The canonical text of a float: shortest round-trip digits; integral values end in ".0";
// below 1e-5 in exponent form ("9.5e-6"), else plain decimal ("0.00001").
function floatText(value) {
  if (Number.isInteger(value)) return `${value}.0`;
  if (Math.abs(value) < 1e-5) return value.toExponential();
  return String(value);
}

function canonicalValue(value, key) {
  if (typeof value === 'number') return key === 'priority' ? String(value) : floatText(value); // priority: an integer
  if (Array.isArray(value)) return `[${value.map(canonicalValue).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).sort(byCodePoint);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalValue(value[k], k)}`).join(',')}}`;
  }
  return JSON.stringify(value); // strings, booleans, null
}

// The exact text hashed: keys sorted, no whitespace, non-ASCII characters unescaped.
function canonical(wire) {
  return canonicalValue(normalise(wire));
}

function identity(wire) {
  return crypto.createHash('sha256').update(canonical(wire), 'utf8').digest('hex');
}

// The version token of an instance: its request subject is hookbus.mw.<module>.<version>.
function version(wires) {
  const joined = wires.map(identity).sort().join(',');
  return crypto.createHash('sha256').update(joined, 'utf8').digest('hex').slice(0, 16);
}

module.exports = { DeclarationError, normalise, canonical, identity, version, TOKEN, MAX_TIMEOUT, DEFAULT_TIMEOUT, WHEN_FIELDS };
