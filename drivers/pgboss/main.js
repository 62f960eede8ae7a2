#!/usr/bin/env node
// durachk's driver for pg-boss (Node.js, Postgres): pg-boss's own worker
// (boss.work: its polling fetch, its expiration of active jobs, its retries
// with delay and backoff, its failed state and dead-letter queue) runs the
// jobs, and the driver reports every step over the worker protocol
// (docs/worker-protocol.md; docs/pgboss.md for the verdicts). The handler is
// what a team writes; the rest is pg-boss's. pg-boss runs its SQL through the
// driver's `db` (pg-boss's documented option for a database of one's own), so
// that the driver sees pg-boss complete or fail a job and with what effect.
//
// Knobs (worker.<name>), named as pg-boss names them, each pg-boss's default
// when not given. Queue options: retryLimit (else each job's max_attempts - 1),
// retryDelay (s), retryBackoff, expireInSeconds, deadLetter (a queue name).
// Constructor: maintenanceIntervalSeconds (the expiration of active jobs runs
// with maintenance). work(): pollingIntervalSeconds, batchSize. Any other
// knob is refused.
//
// Sabotages (worker.sabotage, negative controls): ack-before-effect (the
// handler returns before its work is done: a missing await), swallow-errors
// (the handler catches its job's error and returns: pg-boss completes it).
'use strict';

const crypto = require('node:crypto');
const readline = require('node:readline');
const pg = require('pg');
const PgBoss = require('pg-boss');
const plans = require('pg-boss/src/plans');
const pgbossVersion = require('pg-boss/package.json').version;

const QUEUE = 'jobs';
const SABOTAGES = ['ack-before-effect', 'swallow-errors'];
// The errors the handler throws start with this: a failed job whose output
// does not was failed by pg-boss on its own (expired in the active state).
const OWN = 'durachk: ';

// pg-boss 10's defaults (attorney.js, plans.js), for what hello declares.
const DEFAULTS = { retryLimit: 2, retryDelay: 0, expireInSeconds: 900, maintenanceIntervalSeconds: 120, pollingIntervalSeconds: 2 };

function parseKnobs(knobs) {
  const queue = {};
  const boss = {};
  const work = { batchSize: 1 };
  const num = (k, v, min) => {
    const n = Number(v);
    if (v === '' || !Number.isFinite(n) || n < min) throw new Error(`${k}=${JSON.stringify(v)}: want a number ≥ ${min}`);
    return n;
  };
  const int = (k, v, min) => {
    if (!/^[0-9]+$/.test(v) || Number(v) < min) throw new Error(`${k}=${JSON.stringify(v)}: want an integer ≥ ${min}`);
    return Number(v);
  };
  for (const [k, v] of Object.entries(knobs || {})) {
    switch (k) {
      case 'retryLimit': case 'retryDelay': queue[k] = int(k, v, 0); break;
      case 'expireInSeconds': queue[k] = int(k, v, 1); break;
      case 'retryBackoff':
        if (v !== 'true' && v !== 'false') throw new Error(`retryBackoff=${JSON.stringify(v)}: want true or false`);
        queue[k] = v === 'true'; break;
      case 'deadLetter':
        if (!/^[A-Za-z0-9_.-]{1,50}$/.test(v) || v === QUEUE) throw new Error(`deadLetter=${JSON.stringify(v)}: want a queue name other than ${QUEUE}`);
        queue[k] = v; break;
      case 'maintenanceIntervalSeconds': boss[k] = int(k, v, 1); break;
      case 'pollingIntervalSeconds': work[k] = num(k, v, 0.5); break;
      case 'batchSize': work[k] = int(k, v, 1); break;
      default:
        throw new Error(`unknown knob ${JSON.stringify(k)} (known: retryLimit, retryDelay, retryBackoff, expireInSeconds, deadLetter, maintenanceIntervalSeconds, pollingIntervalSeconds, batchSize)`);
    }
  }
  return { queue, boss, work };
}

// capabilities declares how pg-boss provides each ability, from its
// documentation; they are pg-boss's whatever the knobs, which the notes name.
function capabilities(st) {
  const q = Object.assign({}, DEFAULTS, st.queue, st.boss, st.work);
  return {
    lease: 'native', lease_extension: 'none', token: 'native', fenced_ack: false,
    delivery_count: 'native', dead_letter: 'native', delayed_nack: 'native', cancel: 'native', fifo: false, durable: true,
    notes: [
      `lease: none renewed; an active job past expireInSeconds (${q.expireInSeconds} s) fails by timeout at the next maintenance (every ${q.maintenanceIntervalSeconds} s), which spends one of its retries; a handler running longer than expireInSeconds fails too`,
      "token: the job's retryCount + 1, incremented at every fetch of a job started before; pg-boss completes and fails a job by its id wherever it is active: no fencing",
      `attempts: retryLimit ${st.queue.retryLimit !== undefined ? st.queue.retryLimit : "(each job's max_attempts - 1)"} retries, ${q.retryDelay} s apart${q.retryBackoff ? ', backing off' : ''}; exhausted jobs end failed${q.deadLetter ? ', copied to the dead-letter queue ' + q.deadLetter : ''}`,
      'cancel: boss.cancel (state cancelled)',
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
  process.stderr.write('pgboss driver: ' + a.join(' ') + '\n');
}

// uuidFor is a job's pg-boss id (a UUID) from durachk's: the same job sent
// again is the same row (pg-boss inserts ON CONFLICT DO NOTHING).
function uuidFor(namespace, id) {
  const h = crypto.createHash('sha1').update(namespace + '\0' + id).digest();
  h[6] = (h[6] & 0x0f) | 0x50;
  h[8] = (h[8] & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

// Db is pg-boss's database (its `db` option): a pool of the driver's, and a
// hook on every statement, so that the worker sees what pg-boss did.
class Db {
  constructor(url, onSql) {
    this.pool = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: 5000, application_name: 'durachk-pgboss' });
    this.pool.on('error', () => {}); // a connection lost: pg-boss's next statement fails, and says so
    this.onSql = onSql;
  }
  async executeSql(text, values) {
    if (!this.onSql) return this.pool.query(text, values);
    try {
      const r = await this.pool.query(text, values);
      await this.onSql(text, values, r, null);
      return r;
    } catch (err) {
      await this.onSql(text, values, null, err);
      throw err;
    }
  }
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
  conn.send({ type: 'hello', v: 1, driver: 'durachk-pgboss', library: 'pg-boss', version: pgbossVersion,
    capabilities: capabilities(st), sabotages: SABOTAGES });
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
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
    const poll = setInterval(() => { if (ended) { clearInterval(poll); resolve(); } }, 20);
  });
  if (cfg.role === 'admin') return admin(cfg, st, conn, requests, () => new Promise(r => { wake = r; }), () => ended);
  return work(cfg, st, conn, stopped);
}

// start starts pg-boss in the run's schema (created and migrated by pg-boss,
// under its advisory lock) with the run's queue; supervise: whether this
// instance runs maintenance (expiration) — the workers do, the admin not.
async function start(cfg, st, db, supervise) {
  const boss = new PgBoss(Object.assign({ db, schema: cfg.namespace, supervise, schedule: false, migrate: true }, st.boss));
  boss.on('error', err => log(err && err.message));
  await boss.start();
  const q = Object.assign({}, st.queue);
  if (q.deadLetter) await boss.createQueue(q.deadLetter).catch(ignoreExists);
  await boss.createQueue(QUEUE, q).catch(ignoreExists);
  return boss;
}

function ignoreExists(err) {
  if (!/already exists|duplicate key/.test(String(err && err.message))) throw err;
}

// pgCode maps a failed statement onto the protocol: not connected is
// unavailable (nothing was sent), anything after is ambiguous.
function pgCode(err) {
  const s = String(err && (err.code || err.message));
  if (/ECONNREFUSED|connect ETIMEDOUT|timeout exceeded when trying to connect/.test(s + String(err && err.message))) return 'unavailable';
  return 'ambiguous';
}

async function admin(cfg, st, conn, requests, next, ended) {
  const db = new Db(cfg.broker_url);
  let boss = null;
  const ensure = async () => {
    if (!boss) boss = await start(cfg, st, db, false);
    return boss;
  };
  const answer = (m, a, err, code) => {
    a.type = 'answer';
    a.re = m.id;
    if (err) a.error = { code: code || 'other', message: String(err.message || err) };
    else a.ok = true;
    conn.send(a);
  };
  while (!ended() || requests.length) {
    if (!requests.length) { await next(); continue; }
    const m = requests.shift();
    try {
      switch (m.type) {
        case 'enqueue': {
          const b = await ensure();
          const j = m.job;
          const opts = { id: uuidFor(cfg.namespace, j.id) };
          if (st.queue.retryLimit === undefined) opts.retryLimit = Math.max((j.max_attempts || 1) - 1, 0);
          await b.send(QUEUE, { id: j.id, job: j }, opts);
          answer(m, {});
          break;
        }
        case 'inspect':
          await ensure();
          answer(m, { inventory: await inspect(cfg, st, db) });
          break;
        case 'drop':
          if (boss) await boss.stop({ graceful: false, close: false, wait: true }).catch(() => {});
          boss = null;
          await db.pool.query(`DROP SCHEMA IF EXISTS "${cfg.namespace}" CASCADE`);
          answer(m, {});
          break;
        default:
          answer(m, {}, new Error(`unknown request ${m.type}`), 'unsupported');
      }
    } catch (err) {
      answer(m, {}, err, pgCode(err));
    }
  }
  if (boss) await boss.stop({ graceful: false, close: false, wait: false }).catch(() => {});
  await db.pool.end().catch(() => {});
  return 0;
}

// inspect reports every job of the queue and its dead-letter queue, in
// pg-boss's words (archived ones too).
async function inspect(cfg, st, db) {
  const inv = { queued: [], in_flight: [], dead_lettered: [], moved_by_broker: [], library: {} };
  const s = `"${cfg.namespace}"`;
  // A handler's error (serialized), or pg-boss's own words ({value: {message}}).
  const message = `COALESCE(output->>'message', output->'value'->>'message')`;
  const { rows } = await db.pool.query(
    `SELECT data->>'id' AS id, name, state::text AS state, ${message} AS message, retry_count, completed_on FROM ${s}.job
     UNION ALL SELECT data->>'id', name, state::text, ${message}, retry_count, completed_on FROM ${s}.archive`);
  for (const r of rows) {
    if (!r.id) continue;
    if (r.name !== QUEUE) {
      inv.library[r.id + '@' + r.name] = r.state; // its copy in the dead-letter queue
      continue;
    }
    inv.library[r.id] = r.state === 'failed' ? `failed: ${r.message || ''}` : r.state;
    switch (r.state) {
      case 'created': case 'retry': inv.queued.push(r.id); break;
      case 'active': inv.in_flight.push(r.id); break;
      case 'failed': {
        inv.dead_lettered.push(r.id);
        const msg = r.message || '';
        if (!msg.startsWith(OWN)) {
          // pg-boss failed it on its own: expired in the active state with no retry left.
          inv.moved_by_broker.push({ job: r.id, action: 'dead_lettered', reason: `pg-boss: ${msg}`, deliveries: r.retry_count + 1,
            at: r.completed_on ? new Date(r.completed_on).toISOString() : undefined });
        }
        break;
      }
    }
  }
  return inv;
}

async function work(cfg, st, conn, stopped) {
  const expire = (st.queue.expireInSeconds || DEFAULTS.expireInSeconds) * 1000;
  const completeSql = plans.completeJobs(cfg.namespace);
  const failSql = plans.failJobsById(cfg.namespace);
  // pending: pg-boss id → what the handler invoked and waits for pg-boss to do.
  const pending = new Map();
  const report = m => conn.report(m);
  const outcome = async (uuid, err, affected) => {
    const p = pending.get(uuid);
    if (!p) return;
    pending.delete(uuid);
    const m = { type: p.kind, job_id: p.id, token: p.token, phase: 'ok' };
    if (p.reason) m.reason = p.reason;
    if (err) m.phase = 'fail', m.error = { code: pgCode(err), message: String(err.message) };
    else if (!affected) m.phase = 'fail', m.error = { code: 'stale_token', message: 'pg-boss found the job no longer active' };
    await report(m).catch(() => {});
    if (m.phase === 'ok' && p.then) p.then();
  };
  // What pg-boss's worker did with the jobs its handler returned or threw.
  const onSql = async (text, values, r, err) => {
    if (text !== completeSql && text !== failSql) return;
    const affected = r && r.rows && r.rows[0] ? Number(r.rows[0].count) : 0;
    for (const uuid of values[1] || []) await outcome(uuid, err, affected);
  };
  const db = new Db(cfg.broker_url, onSql);
  let boss;
  for (;;) {
    try {
      boss = await start(cfg, st, db, true);
      break;
    } catch (err) {
      log('start:', err && err.message); // a partition the plan holds: try again
      const again = await Promise.race([stopped.then(() => false), new Promise(r => setTimeout(() => r(true), 300))]);
      if (!again) return 0;
    }
  }
  const invoke = (uuid, p) => {
    pending.set(uuid, p);
    const m = { type: p.kind, job_id: p.id, token: p.token, phase: 'invoke' };
    if (p.reason) m.reason = p.reason;
    if (p.delay_ms !== undefined) m.delay_ms = p.delay_ms;
    return report(m);
  };
  // The handler: the job's work through durachk, then its outcome as pg-boss
  // takes it — return completes, throw retries or fails, cancel cancels.
  const handler = async jobs => {
    for (const job of jobs) await handle(job);
  };
  const handle = async job => {
    const id = job.data.id;
    const attempt = job.retryCount + 1;
    const token = attempt;
    const base = { id, token };
    await report({ type: 'received', job: job.data.job, token, attempt, lease_ms: expire });
    const effect = () => report({ type: 'effect', job_id: id, token, attempt });
    if (cfg.sabotage === 'ack-before-effect') {
      await invoke(job.id, Object.assign({ kind: 'ack', then: () => { effect().catch(() => {}); } }, base));
      return;
    }
    const a = await effect();
    if (cfg.sabotage === 'swallow-errors' && (a.outcome === 'transient' || a.outcome === 'permanent')) {
      await invoke(job.id, Object.assign({ kind: 'ack' }, base)); // catch (err) { log(err) }: the job completes
      return;
    }
    switch (a.outcome) {
      case 'applied': case 'deduped': case 'terminal': case 'stale':
        // stale too: pg-boss completes a job by its id, whatever delivery
        // it is; there is no giving it up to its newer holder.
        await invoke(job.id, Object.assign({ kind: 'ack' }, base));
        return;
      case 'cancelled': {
        await invoke(job.id, Object.assign({ kind: 'ack' }, base));
        let r = null;
        let err = null;
        try { r = await boss.cancel(QUEUE, job.id); } catch (e) { err = e; }
        await outcome(job.id, err, r ? r.affected : 0);
        return;
      }
      case 'permanent': case 'transient': case 'unavailable': {
        // pg-boss retries while retryCount < retryLimit (failJobs), and
        // spends an attempt whatever failed: it cannot put a job back
        // without one.
        const retry = job.retryCount < job.retryLimit && a.outcome !== 'permanent';
        if (a.outcome === 'permanent' || !retry) {
          const reason = a.outcome === 'permanent' ? a.reason : 'max_attempts_exceeded';
          const r = await invoke(job.id, Object.assign({ kind: 'dead_letter', reason }, base));
          if (r.outcome === 'terminal') { await invoke(job.id, Object.assign({ kind: 'ack' }, base)); return; }
          if (a.outcome === 'permanent' && job.retryCount < job.retryLimit) {
            // pg-boss has no error that skips the retries: the handler gives
            // the job up by cancelling it.
            let res = null;
            let err = null;
            try { res = await boss.cancel(QUEUE, job.id); } catch (e) { err = e; }
            await outcome(job.id, err, res ? res.affected : 0);
            return;
          }
          throw new Error(OWN + reason);
        }
        const delay = job.retryBackoff ? job.retryDelay * 1000 * 2 ** job.retryCount : job.retryDelay * 1000;
        await invoke(job.id, Object.assign({ kind: 'nack', delay_ms: delay }, base));
        throw new Error(OWN + a.outcome);
      }
    }
    throw new Error(`unknown outcome ${a.outcome}`);
  };
  await boss.work(QUEUE, Object.assign({ includeMetadata: true }, st.work), handler);
  await stopped;
  await Promise.race([boss.stop({ graceful: false, close: false, wait: true }).catch(() => {}), new Promise(r => setTimeout(r, 1200).unref())]);
  return 0;
}

// pg-boss 10's worker does not await the complete or fail of a job
// (manager.js, watch): one whose connection was lost rejects unhandled, which
// ends a Node.js process by default. A team's supervisor would restart it; the
// driver logs it and goes on, which is the same for the job — it stays
// active until it expires — and keeps the run's other jobs going.
process.on('unhandledRejection', err => log('unhandled rejection (pg-boss did not await it):', err && err.message));

main().then(code => process.exit(code || 0), err => {
  log(err && err.stack || err);
  process.exit(1);
});
