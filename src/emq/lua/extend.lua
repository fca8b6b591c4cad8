-- extend: active -> active (new deadline)
--
-- Re-scores the leases the caller still holds; a heartbeat extends a whole batch in one step.
-- Safety belt: a lease is extended only if the job is in active, its deadline has not passed
-- on the server clock, and the row's token equals the caller's. A late heartbeat therefore
-- never pulls a recovered job back into active while it also sits in pending.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] events     STREAM  lifecycle events
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] lease_ms   integer new lease length from now, ms, > 0
-- ARGV[4..] (id, token)*  one pair per job
-- Returns: array, per job: the new deadline ms, or 0 when the lease is lost
--          (a lease_lost event is appended for each)
-- Errors: none
-- Derives: job:<id> HASH, events:archived STRING (read only)
local k_active = KEYS[1]
local k_events = KEYS[2]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[3])

-- events: appended by the emit function, trimmed once per call by finish (approximate MAXLEN),
-- unless an archiver owns retention (events:archived exists)
local trim = maxlen > 0 and redis.call('EXISTS', k_events .. ':archived') == 0
local emitted = false
local function emit(...)
  if maxlen ~= 0 then
    redis.call('XADD', k_events, '*', ...)
    emitted = true
  end
end
local function finish(reply)
  if emitted and trim then redis.call('XTRIM', k_events, 'MAXLEN', '~', maxlen) end
  return reply
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local score = redis.call('ZSCORE', k_active, id)
  local row = prefix .. 'job:' .. id
  if score and tonumber(score) > now and redis.call('HGET', row, 'token') == token then
    redis.call('ZADD', k_active, 'XX', now + lease_ms, id)
    out[#out + 1] = now + lease_ms
  else
    out[#out + 1] = 0
    emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'extend')
  end
end
return finish(out)
