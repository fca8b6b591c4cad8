-- due_repeats: (read only) -> the schedules whose next tick is due
--
-- Reads the server clock and, when the earliest next tick is due, the spec of up to limit
-- due schedules: what the caller needs to compute their ticks for fire_repeats (cron
-- arithmetic cannot run in Lua). Writes nothing. With no schedule due it costs one TIME and
-- one ZRANGE: the maintenance beat's cheap read.
--
-- KEYS[1] repeats    ZSET    schedules, score = next tick ms
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] limit      integer most due schedules to return, 1..1000
-- Returns: {now ms, earliest next tick ms or -1 (no schedule)}, then per due schedule: key,
--   version, next ms, every_ms or '', cron or '', tz, catch_up, start_at or ''
-- Errors: none
-- Derives: repeat:<key> HASH (read only)
-- Includes: clock
local k_repeats = KEYS[1]
local prefix = ARGV[1]
local limit = tonumber(ARGV[2])

local now = server_ms()
local head = redis.call('ZRANGE', k_repeats, 0, 0, 'WITHSCORES')
if not head[2] then return {now, -1} end
local out = {now, tonumber(head[2])}
if tonumber(head[2]) > now then return out end
local due = redis.call('ZRANGEBYSCORE', k_repeats, '-inf', now, 'LIMIT', 0, limit)
for _, key in ipairs(due) do
  local f = redis.call('HMGET', prefix .. 'repeat:' .. key, 'version', 'next', 'every_ms',
    'cron', 'tz', 'catch_up', 'start_at')
  if f[1] then
    out[#out + 1] = key
    for i = 1, 7 do out[#out + 1] = f[i] end
  end
end
return out
