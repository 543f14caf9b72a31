'use strict';
// Names, buckets and small rules of docs/protocol.md shared by the module and the kernel.

const TOKEN = /^[A-Za-z0-9_-]+$/;

const PROTOCOL = 2; // protocol 1: a module that beats (an explicit heartbeat)
const MODULES_BUCKET = 'hookbus_modules';
const TRUST_BUCKET = 'hookbus_trust';
const GUARDS_BUCKET = 'hookbus_guards';
const MODULES_TTL_MS = 3600 * 1000; // docs/protocol.md: keys of dead instances go after an hour
const MAX_DEPTH = 8;
const REPLY_GRACE = 0.5;
const CAUSE_LIMIT = 1000;
const REPORTED = new Set(['ok', 'absent', 'timeout', 'failed', 'invalid', 'oversize']);

const moduleSubject = (module) => `hookbus.mw.${module}`;

const UTF8 = new TextDecoder('utf-8', { fatal: true });

// One message's JSON (docs/protocol.md: UTF-8, RFC 8259); a SyntaxError for bytes that are not UTF-8
// or for a string or key holding a lone surrogate (`"\ud800"`), which is not text.
function decodeJson(data) {
  let text;
  try {
    text = UTF8.decode(data);
  } catch {
    throw new SyntaxError('not UTF-8');
  }
  return JSON.parse(text, (key, value) => {
    if (!key.isWellFormed() || (typeof value === 'string' && !value.isWellFormed())) throw new SyntaxError('a lone surrogate in a string');
    return value;
  });
}

// Open a bucket, creating it with the protocol's configuration when it is missing.
async function openBucket(js, bucket) {
  const options = { history: 1 };
  if (bucket === MODULES_BUCKET) options.ttl = MODULES_TTL_MS;
  return js.views.kv(bucket, options);
}

// The decision a fault reads as for a handler with this fail mode.
function faultDecision(failClosed, qualname, outcome, cause) {
  if (failClosed) return { decision: 'cancel', reason: `${qualname} is fail-closed and ${outcome}: ${cause}`, handler: qualname };
  return { decision: 'continue' };
}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
const textOrNull = (value) => value === undefined || value === null || typeof value === 'string';
const DECISIONS = new Set(['continue', 'cancel', 'patch']);

// A decision object as a handler returns it; a string naming what is wrong otherwise.
function checkDecision(value) {
  if (!isObject(value)) return 'not a JSON object';
  if (value.decision === 'continue') return null;
  if (value.decision === 'cancel') return typeof value.reason === 'string' ? null : "cancel without a string 'reason'";
  if (value.decision === 'patch') return isObject(value.payload) ? null : "patch without an object 'payload'";
  return `unknown decision ${JSON.stringify(value.decision)}`;
}

// One reaction of a reply (docs/protocol.md, "Reply"): a string naming the field that is wrong, or null.
function checkReaction(item, at) {
  if (!isObject(item)) return `field '${at}' is not an object`;
  if (typeof item.handler !== 'string') return `field '${at}.handler' is not a string`;
  if (typeof item.outcome !== 'string') return `field '${at}.outcome' is not a string`;
  for (const name of ['decision', 'reason', 'cause']) {
    if (!textOrNull(item[name])) return `field '${at}.${name}' is not a string or null`;
  }
  const ms = item.duration_ms;
  if (ms !== undefined && ms !== null && !(typeof ms === 'number' && ms >= 0 && ms < 1e8)) {
    return `field '${at}.duration_ms' is not a number in 0 <= ms < 1e8`;
  }
  return null;
}

// A module's reply as a kernel reads it (docs/protocol.md, "Reply"): a string naming what is wrong, or null.
// Types are checked first (a wrong field makes the whole reply invalid), then the decision's own parts.
function checkReply(reply) {
  if (!isObject(reply)) return 'not a JSON object';
  for (const name of ['reason', 'handler', 'error']) {
    if (name in reply && typeof reply[name] !== 'string') return `field '${name}' is not a string`;
  }
  if ('payload' in reply && !isObject(reply.payload)) return "field 'payload' is not an object";
  if ('decision' in reply && !DECISIONS.has(reply.decision)) return `unknown decision ${JSON.stringify(reply.decision)}`;
  if ('reactions' in reply) {
    if (!Array.isArray(reply.reactions)) return "field 'reactions' is not a list";
    for (let i = 0; i < reply.reactions.length; i += 1) {
      const wrong = checkReaction(reply.reactions[i], `reactions[${i}]`);
      if (wrong !== null) return wrong;
    }
  }
  if ('error' in reply) return `the module answered an error: ${reply.error}`;
  if (!('decision' in reply)) return "field 'decision' is required";
  return checkDecision(reply);
}

// A middleware request as a module reads it (docs/protocol.md, "Request"): a string naming what is wrong, or null.
function checkRequest(request) {
  if (!isObject(request)) return 'the request is not a JSON object';
  if (typeof request.stage !== 'string') return "field 'stage' is not a string";
  if ('payload' in request && !isObject(request.payload)) return "field 'payload' is not an object";
  const { handlers } = request;
  if (handlers !== undefined && handlers !== null && !(Array.isArray(handlers) && handlers.every((h) => typeof h === 'string'))) {
    return "field 'handlers' is not a list of strings";
  }
  if (!('ctx' in request)) return null;
  const { ctx } = request;
  if (!isObject(ctx)) return "field 'ctx' is not an object";
  for (const name of ['session', 'agent']) if (!textOrNull(ctx[name])) return `field 'ctx.${name}' is not a string or null`;
  if ('id' in ctx && typeof ctx.id !== 'string') return "field 'ctx.id' is not a string";
  if ('deadline' in ctx && typeof ctx.deadline !== 'number') return "field 'ctx.deadline' is not a number";
  if ('traceparent' in ctx && typeof ctx.traceparent !== 'string') return "field 'ctx.traceparent' is not a string";
  if ('depth' in ctx && !(Number.isInteger(ctx.depth) && ctx.depth >= 0 && ctx.depth < MAX_DEPTH)) {
    return `ctx.depth ${JSON.stringify(ctx.depth)} is not a whole number in 0..${MAX_DEPTH - 1}`;
  }
  return null;
}

// The payload a patch leaves for the next handler (tool.result remarks wrapped around the output).
function applyPatch(stage, patched, handler) {
  if (stage !== 'tool.result' || typeof patched.remark !== 'string') return patched;
  const out = { ...patched };
  const remark = out.remark;
  delete out.remark;
  out.output = `${typeof out.output === 'string' ? out.output : String(out.output ?? '')}\n\n[hookbus: remark from ${handler}]\n${remark}`;
  return out;
}

function hideOutput(payload, reason, handler) {
  return { ...payload, output: `[hookbus: output hidden by ${handler}: ${reason}]`, hidden: true };
}

// The payload field a handler's match names are compared with.
const AGENT_MATCHED = new Set(['llm.token', 'context.evict', 'user.message', 'assistant.message', 'turn.end', 'agent.spawn', 'agent.terminate']);
function matchField(stage) {
  if (stage === 'llm.request' || stage === 'llm.retry') return 'model';
  if (stage === 'memory.save') return 'key';
  if (AGENT_MATCHED.has(stage)) return 'agent';
  return 'name';
}

// A patch carrying its stage's terminal field ends the chain (docs/protocol.md, Composition).
const TERMINAL = { 'tool.call': 'result', 'llm.request': 'result', 'assistant.message': 'rework' };
function endsRun(stage, payload) {
  const field = TERMINAL[stage];
  return field !== undefined && payload[field] !== undefined && payload[field] !== null;
}

module.exports = {
  TOKEN, PROTOCOL, decodeJson, MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET, MODULES_TTL_MS, MAX_DEPTH, REPLY_GRACE, CAUSE_LIMIT,
  REPORTED, moduleSubject, openBucket, faultDecision, checkDecision, checkReply, checkRequest, applyPatch, hideOutput,
  matchField, endsRun,
};
