-- claim: pending -> active (and due schedule -> pending first)
--
-- Leases up to count jobs under one reading of the server clock. Due scheduled jobs are
-- promoted first, so a retry's backoff ends on time without a separate beat. Safety belt:
-- the pause flag is read here, inside the same step as the pop (a paused queue returns no
-- jobs, not an error); attempts is bumped with HINCRBY and the token derived here, never
-- written by a client; the lease deadline is now + lease_ms on the server clock. A call carrying a
-- request id stores its reply for lease_ms (at most 60 s): a resend of the same call (a
-- retry after a lost reply) gets the same jobs back instead of leasing more and stranding
-- the first ones.
--
-- KEYS[1] pending    ZSET    waiting jobs, score = priority
-- KEYS[2] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[3] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[4] meta       HASH    queue flags (paused)
-- KEYS[5] events     STREAM  lifecycle events
-- KEYS[6] metrics    HASH    counters (missing)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] count      integer most jobs to lease, 1..1000
-- ARGV[4] lease_ms   integer lease length in ms, > 0
-- ARGV[5] request    string  the call's request id, '' for none
-- Returns: flat array: deadline ms, the ids found without their row (an evicted or hand-deleted
--          row: dropped from the set, counted in metrics 'missing', a 'missing' event each),
--          then per job: id, token, attempts, stalled, name, payload (token: a decimal string,
--          max(previous token + 1, server clock in us), so never issued twice for one job)
-- Errors: none
-- Derives: job:<id> HASH, claim:<request> STRING (the stored reply), events:archived STRING (read only)
local k_pending = KEYS[1]
local k_active = KEYS[2]
local k_schedule = KEYS[3]
local k_meta = KEYS[4]
local k_events = KEYS[5]
local k_metrics = KEYS[6]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local request = ARGV[5]

use_events(k_events, maxlen)

local k_reply = prefix .. 'claim:' .. request
if request ~= '' then
  local stored = redis.call('GET', k_reply)
  if stored then return cjson.decode(stored) end
end

local now_us = server_us()
local now = math.floor(now_us / 1000)
local deadline = now + lease_ms
local missing = {}
local out = {deadline, missing}
if redis.call('HGET', k_meta, 'paused') == '1' then return out end

local due = redis.call('ZRANGEBYSCORE', k_schedule, '-inf', now, 'LIMIT', 0, count)
for _, id in ipairs(due) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', k_schedule, id)
  local priority = redis.call('HGET', row, 'priority')
  if priority then
    redis.call('ZADD', k_pending, priority, id)
    redis.call('HSET', row, 'state', 'pending')
    emit('event', 'promoted', 'job', id)
  else
    missing[#missing + 1] = id
    emit('event', 'missing', 'job', id, 'from', 'schedule')
  end
end

local popped = redis.call('ZPOPMIN', k_pending, count)
for i = 1, #popped, 2 do
  local id = popped[i]
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'stalled', 'name', 'payload')
  if f[3] then
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    -- the token carries the server clock, so it is larger than any token issued before for
    -- this job, even one the server issued and then lost with a rollback of its data
    local token = string.format('%.0f', math.max(tonumber(f[1] or '0') + 1, now_us))
    redis.call('HSET', row, 'state', 'active', 'token', token)
    redis.call('ZADD', k_active, deadline, id)
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = attempts
    out[#out + 1] = tonumber(f[2])
    out[#out + 1] = f[3]
    out[#out + 1] = f[4]
    emit('event', 'claimed', 'job', id, 'attempts', attempts, 'token', token)
  else
    missing[#missing + 1] = id
    emit('event', 'missing', 'job', id, 'from', 'pending')
  end
end
if #missing > 0 then redis.call('HINCRBY', k_metrics, 'missing', #missing) end
if request ~= '' and #out > 2 then
  redis.call('SET', k_reply, cjson.encode(out), 'PX', math.min(lease_ms, 60000))
end
return finish(out)
