'use strict';
// A minimal kernel (docs/protocol.md, "Registry", "Trust", "Chain order", "Guard records", "A call").

const crypto = require('node:crypto');
const { connect, ErrorCode } = require('nats');
const { normalise, identity, version } = require('./identity');
const wire = require('./wire');

const SWEEP_MS = 500;
const decode = wire.decodeJson;

class ForeignAnnouncement extends Error {}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);

// Decode a registry value under `key`; throws naming what is wrong.
function parseAnnouncement(key, data) {
  const obj = decode(data);
  if (obj === null || typeof obj !== 'object' || !Array.isArray(obj.handlers)) throw new Error("an announcement is an object with a 'handlers' list");
  const { module } = obj;
  if (typeof module !== 'string' || !wire.TOKEN.test(module)) throw new Error('the module name is not a token');
  const subject = wire.moduleSubject(module);
  // Absent fields take their defaults; present ones (null included) must have their type.
  if (typeof obj.instance !== 'string') throw new Error('the instance is not a string');
  if ('protocol' in obj && !Number.isInteger(obj.protocol)) throw new Error("'protocol' is not an integer");
  if ('subject' in obj && typeof obj.subject !== 'string') throw new Error("'subject' is not a string");
  const heartbeat = 'heartbeat' in obj ? obj.heartbeat : 1.0;
  if (typeof heartbeat !== 'number' || !(heartbeat >= 0.05 && heartbeat <= 60)) throw new Error(`heartbeat ${heartbeat} is not a number in 0.05..60 s`);
  // Protocol 2 (docs/protocol.md): `refresh` seconds between re-puts, no beat; ignored under protocol 1.
  if ('refresh' in obj && (typeof obj.refresh !== 'number' || !(obj.refresh >= 1 && obj.refresh <= 86400))) throw new Error(`refresh ${obj.refresh} is not a number in 1..86400 s`);
  const refresh = (obj.protocol ?? 1) >= 2 && 'refresh' in obj ? obj.refresh : 0;
  const at = 'at' in obj ? obj.at : 0;
  if (typeof at !== 'number' || !Number.isFinite(at)) throw new Error("'at' is not a finite time");
  if (!obj.handlers.every(isObject)) throw new Error('a handler is not an object');
  if (key !== `${module}.${obj.instance}`) throw new ForeignAnnouncement(`entry ${key} announces module ${module}`);
  if ('subject' in obj && obj.subject !== subject) throw new ForeignAnnouncement(`module ${module} announces subject ${obj.subject}`);
  const declarations = obj.handlers.map(normalise);
  if (declarations.some((d) => d.module !== module)) throw new ForeignAnnouncement('a handler names another module');
  return { module, instance: obj.instance, heartbeat, interval: refresh || heartbeat, batch: obj.batch === true, at, declarations,
    subject: `${subject}.${version(declarations)}`, sameAs: JSON.stringify([obj.batch === true, heartbeat, declarations.map(identity)]) };
}

function parseGuard(key, data) {
  const obj = decode(data);
  const decl = normalise(obj.declaration);
  const id = identity(decl);
  if (key !== `${decl.module}.${decl.name}.${id.slice(0, 16)}` || obj.identity !== id) throw new Error(`guard record ${key} does not match its declaration`);
  if (!decl.fail_closed) throw new Error(`guard record ${key} is of a fail-open handler`);
  return { decl, identity: id, at: Number(obj.at) || 0, stoppedAt: obj.stopped_at ?? null };
}

// fnmatch-style glob (`*`, `?`, `[seq]`, `[!seq]`), case-sensitive, over the whole text: a `when` pattern.
function globRegExp(pattern) {
  let out = '';
  for (let i = 0; i < pattern.length; i += 1) {
    const c = pattern[i];
    if (c === '*') out += '[\\s\\S]*';
    else if (c === '?') out += '[\\s\\S]';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + (pattern[i + 1] === '!' ? 3 : 2)); // a ] first in the set is literal
      if (end < 0) { out += '\\['; continue; }
      let body = pattern.slice(i + 1, end).replace(/\\/g, '\\\\');
      if (body.startsWith('!')) body = `^${body.slice(1)}`;
      else if (body.startsWith('^')) body = `\\${body}`;
      out += `[${body}]`;
      i = end;
    } else out += c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  }
  return new RegExp(`^${out}$`, 'u');
}

// Whether a call's ctx is in a link's scope: its grants (agents) and its `when` (every filled field matches).
function inScope(link, ctx) {
  if (link.agents !== null && !(typeof ctx.agent === 'string' && link.agents.has(ctx.agent))) return false;
  for (const [field, patterns] of link.when) {
    const value = ctx[field];
    if (typeof value !== 'string' || !patterns.some((re) => re.test(value))) return false;
  }
  return true;
}

// The chain order with bag producers before their consumers; a cycle among those edges drops them
// (docs/protocol.md, "Chain order"). This example kernel orders by the bag but does not keep one.
function orderWithBag(decls, known, firstApproved) {
  const producers = new Map();
  for (const d of decls) for (const key of d.outputs ?? []) {
    if (!producers.has(key)) producers.set(key, []);
    producers.get(key).push(`${d.module}.${d.name}`);
  }
  const extra = [];
  for (const d of decls) for (const { key } of d.inputs ?? []) {
    for (const name of producers.get(key) ?? []) if (name !== `${d.module}.${d.name}`) extra.push([name, `${d.module}.${d.name}`]);
  }
  if (!extra.length) return order(decls, known, firstApproved);
  try {
    return order(decls, known, firstApproved, extra);
  } catch (err) {
    if (!err || err.broken === undefined) throw err;
    return order(decls, known, firstApproved);
  }
}

const WHEN_CTX = { agents: 'agent', users: 'user', sessions: 'session', templates: 'template' };

// The handlers of `stage` in chain order; throws { broken: reason } on a cycle or a dangling reference.
// Among handlers the references leave unordered: higher priority first, then first approval time, then name.
function order(decls, known, firstApproved = new Map(), extra = []) {
  const byName = new Map(decls.map((d) => [`${d.module}.${d.name}`, d]));
  const edges = new Map(Array.from(byName.keys(), (name) => [name, new Set()]));
  const need = (qualname, ref) => {
    if (ref === qualname) throw { broken: `${qualname} refers to itself` };
    if (byName.has(ref)) return true;
    if (known.has(ref)) return false;
    throw { broken: `${qualname} refers to ${ref}, which is not declared on ${decls[0].stage}` };
  };
  for (const [qualname, d] of byName) {
    for (const ref of d.before) if (need(qualname, ref)) edges.get(qualname).add(ref);
    for (const ref of d.after) if (need(qualname, ref)) edges.get(ref).add(qualname);
  }
  for (const [earlier, later] of extra) edges.get(earlier).add(later);
  const indegree = new Map(Array.from(byName.keys(), (name) => [name, 0]));
  for (const targets of edges.values()) for (const t of targets) indegree.set(t, indegree.get(t) + 1);
  const ready = Array.from(indegree).filter(([, n]) => n === 0).map(([name]) => name);
  const out = [];
  const rank = (name) => [-(byName.get(name).priority ?? 0), firstApproved.get(name) ?? Infinity];
  const before = (a, b) => {
    const [ra, rb] = [rank(a), rank(b)];
    if (ra[0] !== rb[0]) return ra[0] - rb[0];
    if (ra[1] !== rb[1]) return ra[1] < rb[1] ? -1 : 1;
    return a < b ? -1 : a > b ? 1 : 0; // qualified names are ASCII: code unit order is code point order
  };
  while (ready.length) {
    ready.sort(before);
    const name = ready.shift();
    out.push(byName.get(name));
    for (const t of edges.get(name)) {
      indegree.set(t, indegree.get(t) - 1);
      if (indegree.get(t) === 0) ready.push(t);
    }
  }
  if (out.length < byName.size) {
    const stuck = Array.from(indegree).filter(([, n]) => n > 0).map(([name]) => name).sort();
    throw { broken: `cycle among ${stuck.join(', ')}` };
  }
  return out;
}

class Kernel {
  constructor({ managed = [], livenessFactor = 3, journalNeutral = false } = {}) {
    this.managed = new Set(managed);
    this.livenessFactor = livenessFactor;
    this.journalNeutral = journalNeutral;
    this.instances = new Map(); // key -> { ann, seen (ms, monotonic), revision }
    this.approved = new Map(); // qualname -> identity
    this.firstApproved = new Map(); // qualname -> Unix time first approved (the tie-break of equal priorities)
    this.switches = new Map(); // qualname -> { enabled, agents: Set | null } (docs/protocol.md, "Switches")
    this.guards = new Map(); // key -> guard record
    this.chains = new Map();
    this.goneAt = new Map(); // module -> Unix time its last instance was last heard of
    this.absentAt = new Map(); // key -> revision of the announcement a call found absent
    this.started = false;
    this.listeners = new Set();
  }

  async start(servers, { user, pass, inboxPrefix } = {}) {
    const options = { servers, name: 'hookbus-js-kernel' };
    if (user !== undefined) Object.assign(options, { user, pass, inboxPrefix: inboxPrefix ?? `_INBOX.${user}` });
    this.user = user ?? null;
    this.nc = await connect(options);
    const js = this.nc.jetstream();
    this.trustKv = await wire.openBucket(js, wire.TRUST_BUCKET);
    this.guardsKv = await wire.openBucket(js, wire.GUARDS_BUCKET);
    this.modulesKv = await wire.openBucket(js, wire.MODULES_BUCKET);
    await this.follow(this.trustKv, (key, data) => this.onTrust(key, data));
    await this.follow(this.guardsKv, (key, data) => this.onGuard(key, data));
    await this.follow(this.modulesKv, (key, data, revision) => this.onModule(key, data, revision));
    this.started = true;
    this.dropSilent(false);
    this.rebuild();
    this.sweeper = setInterval(() => this.sweep().catch(() => {}), SWEEP_MS);
    (async () => {
      for await (const status of this.nc.status()) if (status.type === 'reconnect') this.refreshSeen();
    })().catch(() => {});
  }

  async follow(kv, onChange) {
    let loaded;
    const ready = new Promise((resolve) => { loaded = resolve; });
    const iter = await kv.watch({ key: '>', initializedFn: () => loaded() });
    (async () => {
      for await (const e of iter) {
        const deleted = e.operation !== 'PUT' || e.value.length === 0;
        onChange(e.key, deleted ? null : e.value, e.revision);
      }
    })().catch((err) => console.error(`watch ended: ${err}`));
    await ready;
  }

  onTrust(key, data) {
    const switched = /^switch\.([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/.exec(key);
    if (switched) {
      this.onSwitch(switched[1], data);
      return;
    }
    let obj = null;
    try { obj = data ? decode(data) : null; } catch { obj = null; }
    const id = obj !== null && typeof obj === 'object' ? obj.identity : null;
    if (typeof id === 'string') this.approved.set(key, id); else this.approved.delete(key);
    const first = id && typeof obj.first_at === 'number' ? obj.first_at : id && typeof obj.at === 'number' ? obj.at : null;
    if (first !== null && first > 0) this.firstApproved.set(key, first); else this.firstApproved.delete(key);
    this.rebuild();
  }

  onGuard(key, data) {
    if (data === null) this.guards.delete(key);
    else {
      try { this.guards.set(key, parseGuard(key, data)); } catch (err) { console.error(`${err.message}: ignored`); return; }
    }
    this.rebuild();
  }

  onModule(key, data, revision) {
    if (data === null) {
      this.absentAt.delete(key);
      this.forget(key, Date.now() / 1000);
      this.rebuild();
      return;
    }
    if (this.absentAt.has(key)) {
      if (revision <= this.absentAt.get(key)) return; // the announcement a call found absent, again: still absent
      this.absentAt.delete(key);
    }
    let ann;
    try { ann = parseAnnouncement(key, data); } catch (err) { console.error(`registry entry ${key}: ${err.message}: ignored`); return; }
    const now = performance.now();
    const age = Math.min(Math.max(0, Date.now() / 1000 - ann.at), 3600) * 1000;
    const seen = this.started || !ann.at ? now : now - age; // stored before the watch began: back-dated
    const known = this.instances.get(key);
    const heard = this.started || !ann.at ? Date.now() / 1000 : ann.at;
    this.instances.set(key, { ann, seen, heard, revision: Math.max(revision, known ? known.revision : 0) });
    if (!known || known.ann.sameAs !== ann.sameAs) this.rebuild();
  }

  forget(key, heard) {
    const found = this.instances.get(key);
    if (!found) return;
    this.instances.delete(key);
    const module = found.ann.module;
    if (!Array.from(this.instances.values()).some((i) => i.ann.module === module)) this.goneAt.set(module, heard);
  }

  // A call to `subject` met no responders: its instances leave the view now (this example does not probe them;
  // they come back with their next put, which a protocol 2 module makes when its connection comes back).
  absent(subject) {
    const keys = Array.from(this.instances).filter(([, i]) => i.ann.subject === subject).map(([k]) => k);
    for (const key of keys) {
      this.absentAt.set(key, this.instances.get(key).revision);
      this.forget(key, Date.now() / 1000);
    }
    if (keys.length) this.rebuild();
  }

  refreshSeen() {
    const now = performance.now();
    for (const inst of this.instances.values()) inst.seen = now;
  }

  silent() {
    const now = performance.now();
    return Array.from(this.instances).filter(([, i]) => now - i.seen > this.livenessFactor * i.ann.interval * 1000).map(([k]) => k);
  }

  dropSilent(rebuild = true) {
    for (const key of this.silent()) this.forget(key, this.instances.get(key).heard);
    if (rebuild) this.rebuild();
  }

  // Drop silent instances once the registry confirms they did not beat (a failed read keeps them).
  async sweep() {
    if (this.nc.isClosed()) return;
    let dropped = false;
    for (const key of this.silent()) {
      let entry;
      try { entry = await this.modulesKv.get(key); } catch { continue; }
      const known = this.instances.get(key);
      if (!known) continue;
      if (entry === null || entry.operation !== 'PUT' || entry.revision === known.revision) {
        this.forget(key, known.heard);
        dropped = true;
      } else if (entry.revision > known.revision) this.onModule(key, entry.value, entry.revision);
    }
    if (dropped) this.rebuild();
  }

  onSwitch(qualname, data) {
    let obj = {};
    try { obj = data ? decode(data) : {}; } catch { return; }
    const agents = obj.agents ?? null;
    const valid = isObject(obj) && typeof (obj.enabled ?? true) === 'boolean'
      && (agents === null || (Array.isArray(agents) && agents.every((a) => typeof a === 'string' && wire.TOKEN.test(a))));
    if (!valid) return; // a malformed record is ignored, as the Python kernel does
    this.switches.set(qualname, { enabled: obj.enabled ?? true, agents: agents === null ? null : new Set(agents) });
    this.rebuild();
  }

  trustOf(decl, qualname) {
    if (this.managed.has(qualname)) return 'managed';
    const approved = this.approved.get(qualname);
    if (approved === undefined) return 'untrusted';
    return approved === identity(decl) ? 'trusted' : 'modified';
  }

  rebuild() {
    if (!this.started) return;
    const live = new Map(); // qualname -> Map(identity -> { decl, ann })
    const sorted = Array.from(this.instances.values()).sort((a, b) => a.seen - b.seen);
    for (const { ann } of sorted) {
      for (const decl of ann.declarations) {
        const qualname = `${decl.module}.${decl.name}`;
        if (!live.has(qualname)) live.set(qualname, new Map());
        const byId = live.get(qualname);
        const id = identity(decl);
        byId.delete(id); // newest last
        byId.set(id, { decl, ann });
      }
    }
    const records = new Map();
    for (const rec of this.guards.values()) {
      const q = `${rec.decl.module}.${rec.decl.name}`;
      if (!records.has(q)) records.set(q, []);
      records.get(q).push(rec);
    }
    const parts = new Map();
    const part = (stage) => { if (!parts.has(stage)) parts.set(stage, { runs: [], holds: [], waiting: [] }); return parts.get(stage); };
    const link = (decl, ann, trust) => {
      const qualname = `${decl.module}.${decl.name}`;
      const agents = (this.switches.get(qualname) ?? { agents: null }).agents;
      const when = Object.entries(decl.when ?? {}).map(([field, patterns]) => [WHEN_CTX[field], patterns.map(globRegExp)]);
      return { decl, qualname, identity: identity(decl), trust, agents, when,
        subject: ann ? ann.subject : '', batch: ann ? ann.batch : false, match: decl.match.length ? new Set(decl.match) : null };
    };
    for (const qualname of new Set([...live.keys(), ...records.keys()])) {
      const byId = live.get(qualname) ?? new Map();
      const versions = Array.from(byId.values());
      const newest = versions[versions.length - 1];
      const recs = records.get(qualname) ?? [];
      const enabled = (this.switches.get(qualname) ?? { enabled: true }).enabled; // disabled: neither runs nor holds
      if (newest && this.managed.has(qualname)) {
        if (enabled) part(newest.decl.stage).runs.push(link(newest.decl, newest.ann, 'managed'));
        continue;
      }
      const approved = this.approved.get(qualname);
      const others = Array.from(byId).filter(([id]) => id !== approved).map(([, v]) => v);
      if (approved !== undefined && byId.has(approved)) {
        const { decl, ann } = byId.get(approved);
        if (enabled) part(decl.stage).runs.push(link(decl, ann, 'trusted'));
      } else if (enabled) {
        const attached = recs.find((r) => r.identity === approved);
        if (attached) {
          const hold = link(attached.decl, null, 'trusted');
          if (others.length) [hold.hold, hold.outcome] = [`${qualname} changed, waiting for approval`, 'changed'];
          else [hold.hold, hold.outcome] = [`${qualname} is ${this.goneText(attached)}`, 'absent'];
          part(attached.decl.stage).holds.push(hold);
        }
      }
      if (others.length) {
        const { decl, ann } = others[others.length - 1];
        part(decl.stage).waiting.push(link(decl, ann, approved === undefined ? 'untrusted' : 'modified'));
      }
    }
    const known = new Set([...live.keys(), ...this.approved.keys(), ...records.keys()]);
    this.chains = new Map();
    for (const [stage, p] of parts) {
      const members = new Map(p.runs.map((l) => [l.qualname, l]));
      const decls = [...p.runs, ...p.holds].map((l) => l.decl);
      try {
        const links = orderWithBag(decls, known, this.firstApproved).map((d) => members.get(`${d.module}.${d.name}`)).filter(Boolean);
        this.chains.set(stage, { stage, links, holds: p.holds, waiting: p.waiting, broken: null, guard: null });
      } catch (err) {
        if (!err || err.broken === undefined) throw err;
        const guards = decls.filter((d) => d.fail_closed).map((d) => `${d.module}.${d.name}`).sort();
        this.chains.set(stage, { stage, links: [], holds: p.holds, waiting: p.waiting, broken: err.broken, guard: guards[0] ?? null });
      }
    }
    for (const listener of this.listeners) listener();
  }

  goneText(rec) {
    const known = [this.goneAt.get(rec.decl.module), rec.stoppedAt].filter((t) => typeof t === 'number' && t);
    if (!known.length) return `gone (it last started at ${clock(rec.at)})`;
    return `gone since ${clock(Math.max(...known))}`;
  }

  // Runnable handlers of `stage`, in chain order.
  runnable(stage) {
    const chain = this.chains.get(stage);
    return chain ? chain.links.map((l) => l.qualname) : [];
  }

  waitUntil(predicate, timeoutMs) {
    if (predicate()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const listener = () => { if (predicate()) { clearTimeout(timer); this.listeners.delete(listener); resolve(); } };
      const timer = setTimeout(() => { this.listeners.delete(listener); reject(new Error('timed out waiting for the view')); }, timeoutMs);
      this.listeners.add(listener);
    });
  }

  async intercept(stage, payload, ctx = {}) {
    const chain = this.chains.get(stage);
    if (!chain) return { decision: 'continue' };
    const depth = Number.isInteger(ctx.depth) ? ctx.depth : 0;
    if (depth >= wire.MAX_DEPTH) return { decision: 'continue' };
    const field = wire.matchField(stage);
    const wants = (l) => (l.match === null || l.match.has(payload[field])) && inScope(l, ctx);
    const wireCtx = { session: ctx.session ?? null, agent: ctx.agent ?? null, depth, id: crypto.randomBytes(8).toString('hex') };
    for (const key of ['user', 'template', 'process']) if (typeof ctx[key] === 'string') wireCtx[key] = ctx[key];
    const journal = new Journal(this, stage, wireCtx);
    try {
      const held = chain.holds.find(wants);
      if (held) {
        const cancel = { decision: 'cancel', reason: held.hold, handler: held.qualname };
        journal.add(held, held.outcome, cancel, 0, held.hold);
        return this.final(stage, cancel, payload);
      }
      for (const l of chain.waiting.filter(wants)) journal.add(l, 'untrusted', { decision: 'continue' }, 0, `${l.trust}: not approved`);
      if (chain.broken) {
        if (chain.guard === null) {
          journal.add(null, 'broken', { decision: 'continue' }, 0, chain.broken);
          return { decision: 'continue' };
        }
        const reason = `chain of ${stage} broken: ${chain.broken}`;
        journal.add(null, 'broken', { decision: 'cancel', reason }, 0, reason);
        return { decision: 'cancel', reason, handler: chain.guard };
      }
      const links = chain.links.filter(wants);
      let current = payload;
      let patched = false;
      let decision = { decision: 'continue' };
      for (let i = 0; i < links.length;) {
        const batch = [links[i]];
        if (links[i].batch) while (i + batch.length < links.length && links[i + batch.length].subject === links[i].subject) batch.push(links[i + batch.length]);
        i += batch.length;
        decision = await this.call(stage, batch, current, wireCtx, journal);
        if (decision.decision === 'cancel') break;
        if (decision.decision === 'patch') [current, patched] = [decision.payload, true];
        if (patched && wire.endsRun(stage, current)) break;
      }
      if (decision.decision === 'cancel') return this.final(stage, decision, current);
      return patched ? { decision: 'patch', payload: current } : { decision: 'continue' };
    } finally {
      journal.flush();
    }
  }

  final(stage, cancel, current) {
    if (stage !== 'tool.result') return cancel;
    return { ...cancel, payload: wire.hideOutput(current, cancel.reason, cancel.handler) };
  }

  // One request for a run of one module's handlers; the reply read through the kernel's declarations.
  async call(stage, batch, payload, wireCtx, journal) {
    const timeout = batch.reduce((sum, l) => sum + l.decl.timeout, 0) + wire.REPLY_GRACE;
    const request = { stage, payload, ctx: { ...wireCtx, deadline: Date.now() / 1000 + timeout }, handlers: batch.map((l) => l.decl.name) };
    const started = performance.now();
    const data = new TextEncoder().encode(JSON.stringify(request));
    const faulted = (outcome, cause) => {
      for (const l of batch) {
        const d = wire.faultDecision(l.decl.fail_closed, l.qualname, outcome, cause);
        journal.add(l, outcome, d, performance.now() - started, cause);
        if (d.decision === 'cancel') return d;
      }
      return { decision: 'continue' };
    };
    if (data.length > this.nc.info.max_payload) return faulted('oversize', `request of ${data.length} bytes is over the server's max_payload (${this.nc.info.max_payload})`);
    let msg;
    try {
      msg = await this.nc.request(batch[0].subject, data, { timeout: timeout * 1000 });
    } catch (err) {
      if (err.code === ErrorCode.NoResponders) {
        this.absent(batch[0].subject); // absent at once (protocol 2): a held guard holds from the next call
        return faulted('absent', 'no responders: the module is not running');
      }
      if (err.code === ErrorCode.Timeout) return faulted('timeout', `no reply within ${timeout}s`);
      return faulted('shutdown', `the request failed: ${err.message}`);
    }
    let reply;
    try {
      reply = decode(msg.data);
    } catch (err) {
      return faulted('invalid', bounded(`invalid reply: ${err.message}`));
    }
    const wrong = wire.checkReply(reply);
    if (wrong !== null) return faulted('invalid', bounded(`invalid reply: ${wrong}`));
    const reactions = Array.isArray(reply.reactions) && reply.reactions.length ? reply.reactions : null;
    if (reactions === null) {
      const l = batch.find((c) => c.qualname === reply.handler) ?? batch[0];
      journal.add(l, 'ok', reply, performance.now() - started, null);
      return named(stage, reply, l);
    }
    for (let index = 0; index < batch.length; index += 1) {
      const l = batch[index];
      const item = reactions[index];
      const handler = item === undefined ? undefined : item.handler; // checkReply: every item is an object
      if (handler !== l.qualname && handler !== l.decl.name) {
        const cause = "the module's reply does not account for it";
        const fault = wire.faultDecision(l.decl.fail_closed, l.qualname, 'invalid', cause);
        journal.add(l, 'invalid', fault, performance.now() - started, cause);
        if (fault.decision === 'cancel') return fault;
        continue;
      }
      const ms = item.duration_ms ?? performance.now() - started; // checkReply: a number in range, or null
      if (item.outcome === 'ok' && (item.decision === 'continue' || item.decision === 'patch')) {
        journal.add(l, 'ok', { decision: item.decision }, ms, null);
        const last = index === reactions.length - 1 && reply.decision === 'patch';
        if (last && item.decision === 'patch' && wire.endsRun(stage, reply.payload)) return named(stage, reply, l);
        continue;
      }
      if (item.outcome === 'ok' && item.decision === 'cancel') {
        const reason = reply.decision === 'cancel' ? reply.reason : item.reason;
        const cancel = { decision: 'cancel', reason: typeof reason === 'string' ? reason : 'cancelled', handler: l.qualname };
        journal.add(l, 'ok', cancel, ms, null);
        return cancel;
      }
      const read = wire.REPORTED.has(item.outcome) && item.outcome !== 'ok' ? item.outcome : 'invalid';
      const cause = bounded(item.cause) ?? `reported ${bounded(JSON.stringify(item.outcome))}, ${bounded(JSON.stringify(item.decision))}`;
      const fault = wire.faultDecision(l.decl.fail_closed, l.qualname, read, cause);
      journal.add(l, read, fault, ms, cause);
      if (fault.decision === 'cancel') return fault;
    }
    return named(stage, reply, batch[batch.length - 1]);
  }

  async stop() {
    clearInterval(this.sweeper);
    await this.nc.drain();
  }
}

function named(stage, decision, l) {
  if (decision.decision === 'cancel') return { decision: 'cancel', reason: decision.reason, handler: l.qualname };
  if (decision.decision === 'patch') return { decision: 'patch', payload: wire.applyPatch(stage, decision.payload, l.qualname) };
  return { decision: 'continue' };
}

// HH:MM:SS in local time.
function clock(unix) {
  const t = new Date(unix * 1000);
  return [t.getHours(), t.getMinutes(), t.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

function bounded(value) {
  if (typeof value !== 'string') return null;
  return value.length <= wire.CAUSE_LIMIT ? value : `${value.slice(0, wire.CAUSE_LIMIT)}…`;
}

// One call's journal entries (kind middleware), published after the call in chain order.
class Journal {
  constructor(kernel, stage, ctx) {
    Object.assign(this, { kernel, stage, ctx, entries: [] });
  }

  add(l, outcome, decision, ms, cause) {
    let verdict;
    let why;
    if (outcome === 'ok') [verdict, why] = [decision.decision, decision.reason ?? null];
    else if (outcome === 'untrusted') [verdict, why] = ['denied', cause];
    else if (['broken', 'changed'].includes(outcome) || decision.reason === cause) [verdict, why] = [outcome, cause];
    else {
      verdict = outcome;
      why = `${cause}; read as ${decision.decision} (${decision.decision === 'cancel' ? 'fail-closed' : 'fail-open'})`;
    }
    if (verdict === 'continue' && !this.kernel.journalNeutral) return; // a neutral continue is not journaled
    this.entries.push({
      kind: 'middleware', point: this.stage, phase: this.stage === 'tool.result' ? 'result' : 'request',
      who: l ? l.qualname : '*', decision: verdict, cause: why ?? null, duration_ms: ms,
      session: this.ctx.session, agent: this.ctx.agent, depth: this.ctx.depth, trace_id: this.ctx.id,
      identity: l ? l.identity : null, process: `hookbus-js-kernel/${process.pid}`, time: new Date().toISOString(),
      id: crypto.randomBytes(8).toString('hex'),
    });
  }

  flush() {
    const subject = this.kernel.user ? `hookbus.journal.middleware.${this.kernel.user}` : 'hookbus.journal.middleware';
    for (const entry of this.entries) this.kernel.nc.publish(subject, new TextEncoder().encode(JSON.stringify(entry)));
    this.entries = [];
  }
}

module.exports = { Kernel, order, globRegExp, parseAnnouncement, parseGuard };
