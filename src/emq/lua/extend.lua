-- extend: active -> active (new deadline)
--
-- Re-scores the leases the caller still holds; a heartbeat extends a whole batch in one step.
-- Safety belt: a lease is extended only if the job is in active, its deadline has not passed
-- on the server clock, and the row's token equals the caller's. A late heartbeat therefore
-- never pulls a recovered job back into active while it also sits in pending.
-- At maxmemory (allow-oom): the server refused the plain call for memory, and emq sends it
-- again with maxlen 0, so a lost lease appends no lease_lost event: re-scoring a member of
-- active is all it writes, which adds no memory, and a live worker's leases outlast an
-- out-of-memory episode of any length.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] events     STREAM  lifecycle events
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] lease_ms   integer new lease length from now, ms, > 0
-- ARGV[4..] (id, token)*  one pair per job
-- Returns: array, per job: the new deadline ms | 'cancelled' (extended all the same, but a
--          cancel was requested (cancel.lua): the worker should stop the job and fail it,
--          which fail.lua turns into a cancelled dead job) | 'lost' (the job exists but this
--          token no longer holds its lease: a lease_lost event is appended) | 'gone' (no row: the job
--          was completed, for instance by an ack that crossed this heartbeat, or removed; no
--          event, so a normal completion never raises a false lease_lost)
-- Errors: none
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   meta HASH (read only), job:<id> HASH, events:archived STRING (read only)
-- Flags: allow-oom
-- Includes: answers, clock, events, layout
local k_active = KEYS[1]
local k_events = KEYS[2]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[3])
use_layout(prefix)

use_events(k_events, maxlen)

local now = server_ms()
local out = {}
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local score = redis.call('ZSCORE', k_active, id)
  local f = redis.call('HMGET', prefix .. 'job:' .. id, 'token', 'cancel', 'state')
  local held = f[1]
  if not f[3] and no_job(prefix, id) then
    out[#out + 1] = ANSWER.gone
  elseif score and tonumber(score) > now and held == token then
    redis.call('ZADD', k_active, 'XX', now + lease_ms, id)
    if f[2] then
      out[#out + 1] = ANSWER.cancelled  -- extended, and the worker is told to stop it
    else
      out[#out + 1] = now + lease_ms
    end
  else
    out[#out + 1] = ANSWER.lost
    emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'extend')
  end
end
return finish(out)
