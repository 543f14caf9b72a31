'use strict';
// A middleware module (docs/protocol.md, "Registry", "Guard records", "Request", "Reply").

const crypto = require('node:crypto');
const os = require('node:os');
const { connect } = require('nats');
const { normalise, identity, version, DeclarationError } = require('./identity');
const wire = require('./wire');

class Module {
  // heartbeat null (the default): protocol 2, put once, on reconnect and before the bucket's max age;
  // a number of seconds: protocol 1, a put every heartbeat.
  constructor(name, { heartbeat = null } = {}) {
    if (typeof name !== 'string' || !wire.TOKEN.test(name)) throw new DeclarationError('a module name must match [A-Za-z0-9_-]+');
    if (heartbeat !== null && !(heartbeat >= 0.05 && heartbeat <= 60)) throw new DeclarationError('heartbeat must be null or within 0.05..60 s');
    this.name = name;
    this.heartbeat = heartbeat;
    this.handlers = new Map(); // handler name -> { decl, fn }
  }

  // Declare fn (async (stage, payload, ctx) => decision) as handler `name` of `stage`.
  stage(stage, name, fn, { fail_closed = false, timeout = 2.0, before = [], after = [], match = null, code } = {}) {
    if (this.handlers.has(name)) throw new DeclarationError(`${this.name}.${name} declared twice`);
    const digest = crypto.createHash('sha256').update(code ?? fn.toString(), 'utf8').digest('hex').slice(0, 16);
    const decl = normalise({ module: this.name, name, stage, fail_closed, timeout, before, after, match, code: digest });
    this.handlers.set(name, { decl, fn });
    return decl;
  }

  get declarations() {
    return Array.from(this.handlers.values(), (h) => h.decl);
  }

  // Answer one request object: run the named handlers in order (see "Reply").
  async handle(request) {
    const stage = String(request.stage ?? '');
    let current = request.payload ?? {};
    const ctx = request.ctx ?? {};
    const todo = Array.isArray(request.handlers)
      ? request.handlers
      : this.declarations.filter((d) => d.stage === stage).map((d) => d.name);
    const reactions = [];
    let patched = false;
    for (const name of todo) {
      const handler = this.handlers.get(name);
      if (handler === undefined || handler.decl.stage !== stage) {
        reactions.push({ handler: `${this.name}.${name}`, outcome: 'absent', decision: 'continue', duration_ms: 0.0, cause: 'not declared here' });
        continue;
      }
      const reaction = await this.run(handler, stage, current, ctx);
      reactions.push(reaction.wire);
      if (reaction.decision.decision === 'cancel') {
        return { decision: 'cancel', reason: reaction.decision.reason, handler: reaction.wire.handler, reactions };
      }
      if (reaction.decision.decision === 'patch') {
        current = wire.applyPatch(stage, reaction.decision.payload, reaction.wire.handler);
        patched = true;
        if (wire.endsRun(stage, current)) break;
      }
    }
    return patched ? { decision: 'patch', payload: current, reactions } : { decision: 'continue', reactions };
  }

  async run({ decl, fn }, stage, payload, ctx) {
    const qualname = `${decl.module}.${decl.name}`;
    const started = performance.now();
    let outcome = 'ok';
    let cause = null;
    let decision;
    let timer;
    try {
      const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new HandlerTimeout()), decl.timeout * 1000);
      });
      decision = await Promise.race([fn(stage, payload, ctx), timeout]);
      const wrong = wire.checkDecision(decision);
      if (wrong !== null) [outcome, cause] = ['invalid', `returned ${wrong}`];
    } catch (err) {
      [outcome, cause] = err instanceof HandlerTimeout ? ['timeout', `no answer within ${decl.timeout}s`] : ['failed', `raised ${err}`];
    } finally {
      clearTimeout(timer);
    }
    const duration_ms = performance.now() - started;
    if (outcome !== 'ok') decision = wire.faultDecision(decl.fail_closed, qualname, outcome, cause);
    const reaction = { handler: qualname, outcome, decision: decision.decision, duration_ms, cause };
    if (decision.decision === 'cancel') reaction.reason = decision.reason;
    return { wire: reaction, decision };
  }

  announcement(instance) {
    return {
      protocol: this.heartbeat === null ? wire.PROTOCOL : 1,
      module: this.name,
      instance,
      subject: wire.moduleSubject(this.name),
      heartbeat: this.heartbeat ?? 1.0,
      batch: true,
      handlers: this.declarations,
      host: os.hostname(),
      pid: process.pid,
      ...(this.heartbeat === null ? { refresh: this.refresh } : {}),
      at: Date.now() / 1000,
    };
  }

  // Connect, record guards, subscribe, announce, beat; resolves to a handle whose stop() ends it cleanly.
  async serve(servers, { detachOnStop = false, user, pass, inboxPrefix } = {}) {
    const options = { servers, name: `hookbus-module-${this.name}` };
    if (user !== undefined) Object.assign(options, { user, pass, inboxPrefix: inboxPrefix ?? `_INBOX.${user}` });
    else if (inboxPrefix !== undefined) options.inboxPrefix = inboxPrefix;
    const nc = await connect(options);
    const js = nc.jetstream();
    const kv = await wire.openBucket(js, wire.MODULES_BUCKET);
    const guarded = this.declarations.filter((d) => d.fail_closed);
    const guards = guarded.length ? await wire.openBucket(js, wire.GUARDS_BUCKET) : null;
    const guardRecord = (decl, at, stoppedAt) => {
      const id = identity(decl);
      return [`${decl.module}.${decl.name}.${id.slice(0, 16)}`, JSON.stringify({ identity: id, declaration: decl, at, stopped_at: stoppedAt })];
    };
    const now = Date.now() / 1000;
    for (const decl of guarded) await guards.put(...guardRecord(decl, now, null));
    const subject = `${wire.moduleSubject(this.name)}.${version(this.declarations)}`;
    const sub = nc.subscribe(subject, { queue: subject, callback: (err, msg) => { if (!err) this.onMessage(nc, msg); } });
    await nc.flush(); // subscribed before announced
    const instance = crypto.randomBytes(6).toString('hex');
    const key = `${this.name}.${instance}`;
    const beat = () => kv.put(key, JSON.stringify(this.announcement(instance)));
    if (this.heartbeat === null) { // protocol 2: re-put within a third of what the bucket keeps, and on reconnect
      const ttlMs = (await kv.status()).ttl;
      this.refresh = Math.max(1, Math.min(ttlMs ? ttlMs / 1000 : 3600, 3600) / 3);
      (async () => { for await (const s of nc.status()) if (s.type === 'reconnect') beat().catch(() => {}); })();
    }
    await beat();
    const every = (this.heartbeat ?? this.refresh) * 1000;
    const timer = setInterval(() => beat().catch((err) => console.error(`announcement put failed: ${err}`)), every);
    const stop = async () => {
      clearInterval(timer);
      const at = Date.now() / 1000;
      for (const decl of guarded) {
        const [gkey, value] = guardRecord(decl, at, at);
        if (detachOnStop) await guards.delete(gkey);
        else await guards.put(gkey, value);
      }
      await kv.delete(key);
      sub.unsubscribe();
      await nc.drain();
    };
    return { nc, subject, key, stop };
  }

  async onMessage(nc, msg) {
    let reply;
    try {
      const request = wire.decodeJson(msg.data);
      const wrong = wire.checkRequest(request);
      if (wrong !== null) throw new Error(wrong);
      reply = await this.handle(request);
    } catch (err) {
      reply = { error: `malformed request: ${err.message}` };
    }
    if (!msg.reply) return;
    let data = JSON.stringify(reply);
    const limit = nc.info.max_payload;
    if (Buffer.byteLength(data) > limit) data = JSON.stringify({ error: `reply of ${Buffer.byteLength(data)} bytes is over the server's max_payload (${limit})` });
    msg.respond(new TextEncoder().encode(data));
  }
}

class HandlerTimeout extends Error {}

module.exports = { Module };
