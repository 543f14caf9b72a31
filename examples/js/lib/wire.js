'use strict';
// Names, buckets and small rules of docs/protocol.md shared by the module and the kernel.

const TOKEN = /^[A-Za-z0-9_-]+$/;

const PROTOCOL = 1;
const MODULES_BUCKET = 'hookbus_modules';
const TRUST_BUCKET = 'hookbus_trust';
const GUARDS_BUCKET = 'hookbus_guards';
const MODULES_TTL_MS = 300 * 1000;
const MAX_DEPTH = 8;
const REPLY_GRACE = 0.5;
const CAUSE_LIMIT = 1000;
const REPORTED = new Set(['ok', 'absent', 'timeout', 'failed', 'invalid', 'oversize']);

const moduleSubject = (module) => `hookbus.mw.${module}`;

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

// A decision object as a handler returns it or a reply carries it; a string naming what is wrong otherwise.
function checkDecision(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'not a JSON object';
  if (value.decision === 'continue') return null;
  if (value.decision === 'cancel') return typeof value.reason === 'string' ? null : "cancel without a string 'reason'";
  if (value.decision === 'patch') {
    const p = value.payload;
    return p !== null && typeof p === 'object' && !Array.isArray(p) ? null : "patch without an object 'payload'";
  }
  return `unknown decision ${JSON.stringify(value.decision)}`;
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
function matchField(stage) {
  if (stage === 'llm.request') return 'model';
  if (stage === 'memory.save') return 'key';
  return 'name';
}

module.exports = {
  TOKEN, PROTOCOL, MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET, MODULES_TTL_MS, MAX_DEPTH, REPLY_GRACE, CAUSE_LIMIT,
  REPORTED, moduleSubject, openBucket, faultDecision, checkDecision, applyPatch, hideOutput, matchField,
};
