package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts of the adapter. Each runs atomically on the server (Redis
// executes a script without interleaving other commands: "Scripting with Lua",
// https://redis.io/docs/latest/develop/interact/programmability/eval-intro/), so
// a check of the pending entry and the write that depends on it cannot be
// separated by another worker's claim. That atomic check is the adapter's
// emulation of a fenced ack: XACK itself checks no owner.
//
// Keys: KEYS[1] the stream, KEYS[2] the delayed set (ZSET, score = due time in
// server milliseconds), KEYS[3] the dead-letter stream, KEYS[4] the entry index
// (HASH entry id -> "base:job id" of every entry the adapter added and has not
// removed itself). Every job entry has the fields id (the job id), base
// (deliveries before this entry, carried across a delayed Nack) and job (the
// JSON job).

// luaNow is the server's clock in milliseconds: every lease, delay and idle
// time of the adapter is measured on it, never on a worker's clock.
const luaNow = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function field(fs, name)
  for i = 1, #fs, 2 do
    if fs[i] == name then return fs[i + 1] end
  end
  return nil
end
`

// luaCheck finds the pending entry ARGV[3] and checks that ARGV[2] holds it
// with delivery count ARGV[4]: 'gone' (acked, dead-lettered, nacked or trimmed)
// or 'stale' (claimed by another consumer or delivered again since) otherwise.
const luaCheck = `
local s, g, c, id, cnt = KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local p = redis.call('XPENDING', s, g, id, id, 1)[1]
if not p then return 'gone' end
if p[2] ~= c or tonumber(p[4]) ~= cnt then return 'stale' end
`

// enqueueScript (KEYS: stream, index; ARGV: job id, base, job, trimming
// strategy MAXLEN|MINID|"", "~"|"", threshold) adds the entry, trimming as
// configured, and records it in the index.
var enqueueScript = goredis.NewScript(`
local a = {KEYS[1]}
if ARGV[4] ~= '' then
  table.insert(a, ARGV[4])
  if ARGV[5] ~= '' then table.insert(a, ARGV[5]) end
  table.insert(a, ARGV[6])
end
for _, x in ipairs({'*', 'id', ARGV[1], 'base', ARGV[2], 'job', ARGV[3]}) do table.insert(a, x) end
local e = redis.call('XADD', unpack(a))
redis.call('HSET', KEYS[2], e, ARGV[2] .. ':' .. ARGV[1])
return e
`)

// leaseScript (KEYS: stream, delayed, index; ARGV: group, consumer, min-idle
// ms) moves due delayed jobs back into the stream, then claims one entry idle for at least min-idle
// (XAUTOCLAIM, which bumps its delivery counter), else reads one new entry
// (XREADGROUP >, delivery counter 1). It returns {entry id, fields, delivery
// count} or nil.
var leaseScript = goredis.NewScript(luaNow + `
local s, dl, g, c = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local due = redis.call('ZRANGEBYSCORE', dl, '-inf', now_ms(), 'LIMIT', 0, 64)
for _, m in ipairs(due) do
  local j = cjson.decode(m)
  local e = redis.call('XADD', s, '*', 'id', j.id, 'base', j.base, 'job', j.job)
  redis.call('HSET', KEYS[3], e, j.base .. ':' .. j.id)
  redis.call('ZREM', dl, m)
end
local cursor = '0-0'
repeat
  local r = redis.call('XAUTOCLAIM', s, g, c, ARGV[3], cursor, 'COUNT', 1)
  cursor = r[1]
  local e = r[2][1]
  if e then
    local p = redis.call('XPENDING', s, g, e[1], e[1], 1)[1]
    return {e[1], e[2], p[4]}
  end
until cursor == '0-0'
local x = redis.call('XREADGROUP', 'GROUP', g, c, 'COUNT', 1, 'STREAMS', s, '>')
if x then
  local e = x[1][2][1]
  return {e[1], e[2], 1}
end
return false
`)

// ackScript (ARGV: group, consumer, entry id, count) acks and deletes the entry
// (a pending entry the server trimmed can still be acked: its job is done).
var ackScript = goredis.NewScript(luaCheck + `
redis.call('XACK', s, g, id)
redis.call('XDEL', s, id)
redis.call('HDEL', KEYS[4], id)
return 'ok'
`)

// extendScript (ARGV: group, consumer, entry id, count, lease ms) resets the
// entry's idle time with XCLAIM ... JUSTID, which does not bump the delivery
// counter, if the lease is still live.
var extendScript = goredis.NewScript(luaCheck + `
if tonumber(p[3]) >= tonumber(ARGV[5]) then return 'expired' end
redis.call('XCLAIM', s, g, c, 0, id, 'JUSTID')
return 'ok'
`)

// nackScript (ARGV: group, consumer, entry id, count, delay ms) removes the
// entry and schedules its job in the delayed set, its base advanced by the
// entry's deliveries.
var nackScript = goredis.NewScript(luaNow + luaCheck + `
local e = redis.call('XRANGE', s, id, id)[1]
redis.call('XACK', s, g, id)
if not e then return 'gone' end
local m = cjson.encode({e = id, id = field(e[2], 'id'), job = field(e[2], 'job'),
  base = tostring(tonumber(field(e[2], 'base')) + tonumber(p[4]))})
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[5]), m)
redis.call('XDEL', s, id)
redis.call('HDEL', KEYS[4], id)
return 'ok'
`)

// deadScript (ARGV: group, consumer, entry id, count, reason) moves the entry's
// job to the dead-letter stream.
var deadScript = goredis.NewScript(luaNow + luaCheck + `
local e = redis.call('XRANGE', s, id, id)[1]
redis.call('XACK', s, g, id)
if not e then return 'gone' end
redis.call('XADD', KEYS[3], '*', 'id', field(e[2], 'id'), 'reason', ARGV[5],
  'attempt', tostring(tonumber(field(e[2], 'base')) + tonumber(p[4])), 'job', field(e[2], 'job'))
redis.call('XDEL', s, id)
redis.call('HDEL', KEYS[4], id)
return 'ok'
`)

// inspectScript (ARGV: group, idle ms at which a pending entry counts as
// queued again, 0: never) lists job ids: {queued, in flight, dead, gone}, from
// one atomic snapshot; gone holds {entry id, job id, deliveries} of each entry
// of the index that the stream no longer holds (deliveries: the base plus the
// pending list's count while it still has the entry).
var inspectScript = goredis.NewScript(luaNow + `
local s, dl, dead, g, claim = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])
local idle, count = {}, {}
for _, p in ipairs(redis.call('XPENDING', s, g, '-', '+', 1000000)) do
  idle[p[1]] = tonumber(p[3])
  count[p[1]] = tonumber(p[4])
end
local q, f, d, gone, present = {}, {}, {}, {}, {}
for _, e in ipairs(redis.call('XRANGE', s, '-', '+')) do
  present[e[1]] = true
  local i = idle[e[1]]
  if i == nil or (claim > 0 and i >= claim) then
    table.insert(q, field(e[2], 'id'))
  else
    table.insert(f, field(e[2], 'id'))
  end
end
for _, m in ipairs(redis.call('ZRANGE', dl, 0, -1)) do table.insert(q, cjson.decode(m).id) end
for _, e in ipairs(redis.call('XRANGE', dead, '-', '+')) do table.insert(d, field(e[2], 'id')) end
local ix = redis.call('HGETALL', KEYS[4])
for i = 1, #ix, 2 do
  local e = ix[i]
  if not present[e] then
    local base, job = string.match(ix[i + 1], '^(%d+):(.*)$')
    table.insert(gone, e)
    table.insert(gone, job)
    table.insert(gone, tonumber(base) + (count[e] or 0))
  end
end
return {q, f, d, gone}
`)
