#!/usr/bin/env node
// durachk's driver for BullMQ (Node.js, Redis): BullMQ's own Worker runs the
// jobs — its lock and lock token, its lock renewal, its stalled-job check,
// attempts and backoff, its failed set — and the driver reports every step
// over the worker protocol (docs/worker-protocol.md; docs/bullmq.md for the
// verdicts). The processor is what a team writes; the rest is BullMQ's.
//
// Knobs (worker.<name>), named as BullMQ names them, each BullMQ's default when
// not given. Worker options: lockDuration, lockRenewTime, stalledInterval
// (ms), maxStalledCount, maxStartedAttempts, concurrency, drainDelay (s),
// skipLockRenewal, skipStalledCheck. Job options: attempts (else each job's
// max_attempts), backoff.type (fixed | exponential), backoff.delay (ms),
// backoff.jitter (0..1), removeOnComplete, removeOnFail (true, false or a
// count to keep). Any other knob is refused.
//
// Sabotages (worker.sabotage, negative controls): ack-before-effect (the
// processor returns before its work is done: a missing await), swallow-errors
// (the processor catches its job's error and returns: BullMQ completes the
// job). There is no ignore-token: BullMQ finishes only a job that is active,
// whatever the token, so a processor completing with the token "0" (which
// skips the lock check) is refused once the job's next holder finished it —
// nearly always, as its next holder is quick (docs/bullmq.md).
'use strict';

const readline = require('node:readline');
const { Queue, Worker, UnrecoverableError, DelayedError, isNotConnectionError } = require('bullmq');
const IORedis = require('ioredis');
const bullmqVersion = require('bullmq/package.json').version;

const QUEUE = 'jobs';
const SABOTAGES = ['ack-before-effect', 'swallow-errors'];
// The errors the processor throws start with this: a failed job whose reason
// does not was failed by BullMQ on its own (a stalled job over its limit).
const OWN = 'durachk: ';
const CANCELLED = OWN + 'cancelled';

// BullMQ's defaults (WorkerOptions in bullmq 6.7.6), for what hello declares.
const DEFAULTS = { lockDuration: 30000, stalledInterval: 30000, maxStalledCount: 1 };

function parseKnobs(knobs) {
  const worker = {};
  const job = {};
  const int = (k, v, min) => {
    if (!/^[0-9]+$/.test(v) || Number(v) < min) throw new Error(`${k}=${JSON.stringify(v)}: want an integer ≥ ${min}`);
    return Number(v);
  };
  const bool = (k, v) => {
    if (v !== 'true' && v !== 'false') throw new Error(`${k}=${JSON.stringify(v)}: want true or false`);
    return v === 'true';
  };
  const keep = (k, v) => (v === 'true' || v === 'false' ? v === 'true' : int(k, v, 0));
  for (const [k, v] of Object.entries(knobs || {})) {
    switch (k) {
      case 'lockDuration': case 'lockRenewTime': case 'stalledInterval':
        worker[k] = int(k, v, 1); break;
      case 'maxStalledCount': worker[k] = int(k, v, 0); break;
      case 'maxStartedAttempts': case 'concurrency': worker[k] = int(k, v, 1); break;
      case 'drainDelay': worker[k] = int(k, v, 0); break;
      case 'skipLockRenewal': case 'skipStalledCheck': worker[k] = bool(k, v); break;
      case 'attempts': job.attempts = int(k, v, 1); break;
      case 'backoff.type':
        if (v !== 'fixed' && v !== 'exponential') throw new Error(`backoff.type=${JSON.stringify(v)}: want fixed or exponential`);
        job.backoff = Object.assign(job.backoff || {}, { type: v }); break;
      case 'backoff.delay': job.backoff = Object.assign(job.backoff || {}, { delay: int(k, v, 0) }); break;
      case 'backoff.jitter': {
        const j = Number(v);
        if (!(j >= 0 && j <= 1)) throw new Error(`backoff.jitter=${JSON.stringify(v)}: want a number from 0 to 1`);
        job.backoff = Object.assign(job.backoff || {}, { jitter: j }); break;
      }
      case 'removeOnComplete': case 'removeOnFail': job[k] = keep(k, v); break;
      default:
        throw new Error(`unknown knob ${JSON.stringify(k)} (known: lockDuration, lockRenewTime, stalledInterval, maxStalledCount, maxStartedAttempts, concurrency, drainDelay, skipLockRenewal, skipStalledCheck, attempts, backoff.type, backoff.delay, backoff.jitter, removeOnComplete, removeOnFail)`);
    }
  }
  if (job.backoff && !job.backoff.type) throw new Error('backoff.delay without backoff.type');
  if (job.backoff && job.backoff.delay === undefined) job.backoff.delay = 0;
  return { worker, job };
}

// capabilities declares how BullMQ provides each ability, from its
// documentation. They are BullMQ's, whatever the knobs: a setting that gives
// one up (skipLockRenewal, removeOnFail) shows as the verdict it changes, not
// as a contract skipped; the notes say how it is configured.
function capabilities(st) {
  const w = Object.assign({}, DEFAULTS, st.worker);
  const renews = !w.skipLockRenewal;
  return {
    lease: 'native', lease_extension: 'native', token: 'native', fenced_ack: true,
    delivery_count: 'native', dead_letter: 'native', delayed_nack: 'native', cancel: 'emulated', fifo: false, durable: true,
    notes: [
      `lease: the job's lock (lockDuration ${w.lockDuration} ms${renews ? ', renewed every ' + (w.lockRenewTime || w.lockDuration / 2) + ' ms' : ', never renewed'}); a job whose lock is gone goes back to wait at the stalled check (every ${w.stalledInterval} ms), and to failed once stalled more than maxStalledCount ${w.maxStalledCount} times`,
      "token: the job's attemptsStarted, incremented at every fetch; BullMQ refuses to finish a job whose lock token is not the worker's",
      `attempts: each job's max_attempts${st.job.attempts ? ', overridden by attempts=' + st.job.attempts : ''}, retried ${st.job.backoff ? 'after a ' + st.job.backoff.type + ' backoff of ' + st.job.backoff.delay + ' ms' : 'at once (no backoff)'}; exhausted jobs go to the failed set${st.job.removeOnFail === true ? ', removed at once (removeOnFail)' : ''}`,
      'cancel: BullMQ has no cancelled state: a job past its deadline fails with UnrecoverableError("durachk: cancelled")',
    ],
  };
}

class Conn {
  constructor() {
    this.nextID = 0;
    this.wait = new Map();
  }
  send(m) {
    process.stdout.write(JSON.stringify(m) + '\n'); // one write per line (a pipe on Linux: synchronous)
  }
  // report sends a report and waits for durachk's answer.
  report(m) {
    const id = ++this.nextID;
    m.id = id;
    return new Promise((resolve, reject) => {
      this.wait.set(id, { resolve, reject });
      this.send(m);
    });
  }
  answered(m) {
    const w = this.wait.get(m.re);
    if (!w) return;
    this.wait.delete(m.re);
    if (m.error) w.reject(Object.assign(new Error(`${m.error.code}: ${m.error.message || ''}`), { code: m.error.code }));
    else w.resolve(m);
  }
  closed() {
    for (const w of this.wait.values()) w.reject(new Error('durachk went away'));
    this.wait.clear();
  }
}

function log(...a) {
  process.stderr.write('bullmq driver: ' + a.join(' ') + '\n');
}

// errorCode maps an error of a BullMQ call onto the protocol's codes: a lock
// that is not the worker's is a stale token; a command that may have reached
// Redis is ambiguous.
function errorCode(err) {
  // BullMQ's ErrorCode: -2 the lock is missing, -3 the job is not active,
  // -6 the lock is another worker's.
  if (err && [-2, -3, -6].includes(err.code)) return 'stale_token';
  if (!isNotConnectionError(err) || /ECONNREFUSED|Connection is closed|ETIMEDOUT|ECONNRESET/.test(String(err && err.message))) return 'ambiguous';
  return 'other';
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const lines = rl[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.done) throw new Error('no configuration on stdin');
  const cfg = JSON.parse(first.value);
  const conn = new Conn();
  let st;
  try {
    st = parseKnobs(cfg.knobs);
    if (cfg.sabotage && !SABOTAGES.includes(cfg.sabotage)) throw new Error(`no sabotage ${JSON.stringify(cfg.sabotage)}`);
  } catch (e) {
    conn.send({ type: 'hello', v: 1, error: e.message });
    return 0;
  }
  conn.send({ type: 'hello', v: 1, driver: 'durachk-bullmq', library: 'bullmq', version: bullmqVersion,
    capabilities: capabilities(st), sabotages: SABOTAGES });

  const prefix = cfg.namespace; // every key of the run: <namespace>:jobs:...
  const requests = [];
  let wake = null;
  let ended = false;
  (async () => {
    for await (const line of lines) {
      let m;
      try { m = JSON.parse(line); } catch { continue; }
      if (m.type === 'answer') conn.answered(m);
      else { requests.push(m); if (wake) wake(); }
    }
    ended = true;
    conn.closed();
    if (wake) wake();
  })();
  const stopped = new Promise(resolve => {
    const end = () => resolve();
    process.once('SIGTERM', end);
    process.once('SIGINT', end);
    const poll = setInterval(() => { if (ended) { clearInterval(poll); end(); } }, 20);
  });
  if (cfg.role === 'admin') return admin(cfg, st, conn, prefix, requests, () => new Promise(r => { wake = r; }), () => ended);
  return work(cfg, st, conn, prefix, stopped);
}

function redisFor(cfg, opts) {
  const r = new IORedis(cfg.broker_url, Object.assign({ lazyConnect: false }, opts));
  r.on('error', () => {}); // ioredis reconnects; BullMQ reports what failed
  return r;
}

// admin answers enqueue, inspect and drop until stdin closes.
async function admin(cfg, st, conn, prefix, requests, next, ended) {
  // Fail fast where a request cannot reach Redis: the producer retries.
  const redis = redisFor(cfg, { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 2000 });
  const queue = new Queue(QUEUE, { connection: redis, prefix });
  queue.on('error', () => {});
  const answer = (m, a, err, code) => {
    a.type = 'answer';
    a.re = m.id;
    if (err) a.error = { code: code || 'other', message: String(err.message || err) };
    else a.ok = true;
    conn.send(a);
  };
  const timed = (p, ms) => Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(Object.assign(new Error(`no answer within ${ms} ms`), { timeout: true })), ms).unref())]);
  while (!ended() || requests.length) {
    if (!requests.length) { await next(); continue; }
    const m = requests.shift();
    const ready = redis.status === 'ready';
    try {
      switch (m.type) {
        case 'enqueue': {
          const j = m.job;
          const opts = Object.assign({}, st.job, { jobId: j.id, attempts: st.job.attempts || Math.max(j.max_attempts || 1, 1) });
          await timed(queue.add('durachk', { job: j }, opts), 10000);
          answer(m, {});
          break;
        }
        case 'inspect':
          answer(m, { inventory: await timed(inspect(queue), 20000) });
          break;
        case 'drop':
          await timed(drop(queue, redis, prefix), 20000);
          answer(m, {});
          break;
        default:
          answer(m, {}, new Error(`unknown request ${m.type}`), 'unsupported');
      }
    } catch (err) {
      // Not connected when it began: Redis never had it.
      answer(m, {}, err, !ready ? 'unavailable' : err.timeout ? 'ambiguous' : errorCode(err));
    }
  }
  await Promise.race([queue.close().catch(() => {}), new Promise(r => setTimeout(r, 1000).unref())]);
  redis.disconnect();
  return 0;
}

// inspect reports every job of the queue in BullMQ's words.
async function inspect(queue) {
  const inv = { queued: [], in_flight: [], dead_lettered: [], moved_by_broker: [], library: {} };
  const states = ['waiting', 'prioritized', 'delayed', 'paused', 'waiting-children', 'active', 'completed', 'failed'];
  for (const state of states) {
    const jobs = await queue.getJobs([state], 0, -1, true);
    for (const job of jobs) {
      if (!job) continue;
      const id = job.id;
      if (state === 'failed') {
        const reason = job.failedReason || '';
        inv.library[id] = `failed: ${reason}`;
        if (reason.startsWith(CANCELLED)) continue; // cancelled at its deadline: no dead letter
        inv.dead_lettered.push(id);
        if (!reason.startsWith(OWN)) {
          // BullMQ failed it on its own: stalled or started too many times.
          inv.moved_by_broker.push({ job: id, action: 'dead_lettered', reason: `bullmq: ${reason}`,
            deliveries: job.attemptsStarted || 0, at: job.finishedOn ? new Date(job.finishedOn).toISOString() : undefined });
        }
        continue;
      }
      inv.library[id] = state;
      if (state === 'active') inv.in_flight.push(id);
      else if (state !== 'completed') inv.queued.push(id);
    }
  }
  return inv;
}

// drop removes every key of the run's namespace: the queue (obliterate), and
// whatever else is under the prefix.
async function drop(queue, redis, prefix) {
  await queue.obliterate({ force: true }).catch(() => {});
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', prefix + ':*', 'COUNT', 500);
    cursor = next;
    if (keys.length) await redis.del(...keys);
  } while (cursor !== '0');
}

// work runs BullMQ's Worker until stopped.
async function work(cfg, st, conn, prefix, stopped) {
  const lockDuration = st.worker.lockDuration || DEFAULTS.lockDuration;
  const active = new Map(); // job id → its token (attemptsStarted) while the processor holds it
  // pending: job id → what the processor invoked ('ack', 'nack', 'dead_letter')
  // and is waiting for BullMQ to do, with what to run once it is done.
  const pending = new Map();

  const report = m => conn.report(m);
  const outcome = async (job, err) => {
    const p = pending.get(job.id);
    if (!p) return;
    pending.delete(job.id);
    const m = { type: p.kind, job_id: job.id, token: p.token, phase: err ? 'fail' : 'ok' };
    if (p.reason) m.reason = p.reason;
    if (err) m.error = { code: errorCode(err), message: String(err.message) };
    await report(m).catch(() => {});
    if (!err && p.then) p.then();
  };
  // finished wraps the job's moves that end its delivery (BullMQ's Worker
  // calls them once the processor returns or throws): the outcome of what the
  // processor invoked is reported after BullMQ did it, or refused it.
  const finished = (job, method) => {
    const orig = job[method].bind(job);
    job[method] = async (...args) => {
      try {
        const r = await orig(...args);
        await outcome(job, null);
        return r;
      } catch (err) {
        // A lost connection: BullMQ's Worker calls again after runRetryDelay.
        if (isNotConnectionError(err)) await outcome(job, err);
        throw err;
      }
    };
  };
  const invoke = (job, token, kind, extra) => {
    pending.set(job.id, Object.assign({ kind, token }, extra));
    return report(Object.assign({ type: kind, job_id: job.id, token, phase: 'invoke' }, extra));
  };

  // The processor: the job's work through durachk, then its outcome as BullMQ
  // takes it — return completes, throw retries (attempts, backoff) or fails,
  // UnrecoverableError fails at once.
  const processor = async (job, lockToken) => {
    const token = job.attemptsStarted;
    const attempt = job.attemptsMade + 1;
    active.set(job.id, token);
    finished(job, 'moveToCompleted');
    finished(job, 'moveToFailed');
    try {
      await report({ type: 'received', job: job.data.job, token, attempt, lease_ms: lockDuration });
      const effect = () => report({ type: 'effect', job_id: job.id, token, attempt });
      if (cfg.sabotage === 'ack-before-effect') {
        // The work runs after BullMQ completed the job (a missing await).
        await invoke(job, token, 'ack', {});
        pending.get(job.id).then = () => { effect().catch(() => {}); };
        return;
      }
      const a = await effect();
      if (cfg.sabotage === 'swallow-errors' && (a.outcome === 'transient' || a.outcome === 'permanent')) {
        await invoke(job, token, 'ack', {}); // catch (err) { log(err) }: the job completes
        return;
      }
      switch (a.outcome) {
        case 'applied': case 'deduped': case 'terminal': case 'stale':
          // stale too: a processor can only return or throw; BullMQ's lock
          // check refuses the zombie's completion (ack fail, stale_token).
          await invoke(job, token, 'ack', {});
          return;
        case 'cancelled':
          await invoke(job, token, 'ack', {});
          throw new UnrecoverableError(CANCELLED + ': deadline passed');
        case 'permanent': {
          const r = await invoke(job, token, 'dead_letter', { reason: a.reason });
          if (r.outcome === 'terminal') { await invoke(job, token, 'ack', {}); return; }
          throw new UnrecoverableError(OWN + (a.reason || 'permanent'));
        }
        case 'transient': {
          const err = new Error(OWN + 'transient');
          const [retry, delay] = await job.shouldRetryJob(err);
          if (!retry) {
            const r = await invoke(job, token, 'dead_letter', { reason: 'max_attempts_exceeded' });
            if (r.outcome === 'terminal') { await invoke(job, token, 'ack', {}); return; }
          } else {
            await invoke(job, token, 'nack', { delay_ms: delay || 0 });
          }
          throw err;
        }
        case 'unavailable': {
          // durachk's store did not answer: back to BullMQ without spending an
          // attempt (moveToDelayed, then DelayedError: BullMQ's manual delay).
          const delay = Math.max(cfg.poll_ms || 0, 100);
          await invoke(job, token, 'nack', { delay_ms: delay, reason: 'released' });
          try {
            await job.moveToDelayed(Date.now() + delay, lockToken);
            await outcome(job, null);
          } catch (err) {
            await outcome(job, err);
          }
          throw new DelayedError();
        }
      }
      throw new Error(`unknown outcome ${a.outcome}`);
    } finally {
      active.delete(job.id);
    }
  };

  const connection = redisFor(cfg, { maxRetriesPerRequest: null });
  const opts = Object.assign({ connection, prefix, name: cfg.process, autorun: false }, st.worker);
  const worker = new Worker(QUEUE, processor, opts);
  worker.on('error', err => log(err && err.message));
  // Lock renewals, as BullMQ's lock manager reports them.
  const extended = (ids, err) => {
    for (const id of ids || []) {
      const token = active.get(id);
      if (token === undefined) continue;
      const m = { type: 'extended', job_id: id, token, lease_ms: lockDuration };
      if (err) m.error = { code: 'lease_lost', message: 'BullMQ could not renew the lock' };
      report(m).catch(() => {});
    }
  };
  worker.on('locksRenewed', e => extended(e && e.jobIds));
  worker.on('lockRenewalFailed', ids => extended(ids, true));
  worker.run().catch(err => log('run:', err && err.message));
  await stopped;
  // Stop taking jobs and exit within durachk's two seconds.
  await Promise.race([worker.close(true).catch(() => {}), new Promise(r => setTimeout(r, 1200).unref())]);
  connection.disconnect();
  return 0;
}

main().then(code => process.exit(code || 0), err => {
  log(err && err.stack || err);
  process.exit(1);
});
