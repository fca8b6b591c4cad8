-- due_repeats: (read only) -> the schedules whose next tick is due
--
-- Reads the server clock and, when the earliest due score is reached, the stored state of
-- up to limit due schedules: what the caller needs to compute their ticks for fire_repeats
-- (cron arithmetic cannot run in Lua) and to check the state is one repeat() would write
-- (a hand edit or a partial restore can leave any field missing or garbled; the caller
-- parks such a schedule through fire_repeats instead of firing it); of the payload only
-- whether it is JSON. Every due entry is returned, one without a row too (its version
-- nil). With audit 1 it also returns up to limit schedules that have a row and a slot in
-- repeat-slots but no due score (a partial restore: no firer would ever find them), their
-- score nil. Writes nothing. With no schedule due and no audit it costs one TIME and one
-- ZRANGE: the maintenance beat's cheap read; an audit reads repeat-slots (up to 4,096).
--
-- KEYS[1] repeats        ZSET    schedules, score = next tick ms
-- KEYS[2] repeat-slots  HASH    slot -> schedule key, or '~<ms>' once freed at that time
-- ARGV[1] prefix         string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] limit          integer most due schedules to return, 1..1000
-- ARGV[3] audit          integer 1: also the schedules without a due score; 0: not
-- Returns: {now ms, earliest due score ms or -1 (no schedule)}, then per schedule: key, due
--   score ms (nil: it has none), version, next, every_ms, cron, tz, catch_up, start_at,
--   slot, floor, name, lane, priority, max_attempts, each as stored (nil when missing; all
--   nil: no row), and 'json' or 'bad' as its payload decodes as JSON or not (nil: missing)
-- Errors: none
-- Derives: meta HASH (read only), repeat:<key> HASH (read only)
-- Includes: clock, layout
local k_repeats = KEYS[1]
local k_repeat_slots = KEYS[2]
local prefix = ARGV[1]
local limit = tonumber(ARGV[2])
local audit = ARGV[3] == '1'
use_layout(prefix)
local FIELDS = {'version', 'next', 'every_ms', 'cron', 'tz', 'catch_up', 'start_at', 'slot',
  'floor', 'name', 'lane', 'priority', 'max_attempts', 'payload'}

local now = server_ms()
local head = redis.call('ZRANGE', k_repeats, 0, 0, 'WITHSCORES')
local out = {now, head[2] and tonumber(head[2]) or -1}

local function add(key, score)
  local f = redis.call('HMGET', prefix .. 'repeat:' .. key, unpack(FIELDS))
  local payload = f[#FIELDS]  -- a job of a payload that is not JSON could not be claimed
  f[#FIELDS] = payload and (pcall(cjson.decode, payload) and 'json' or 'bad')
  out[#out + 1] = key
  out[#out + 1] = score
  for i = 1, #FIELDS do out[#out + 1] = f[i] end
end

if head[2] and tonumber(head[2]) <= now then
  local due = redis.call('ZRANGEBYSCORE', k_repeats, '-inf', now, 'WITHSCORES', 'LIMIT', 0,
    limit)
  for i = 1, #due, 2 do add(due[i], due[i + 1]) end
end
if audit then
  local slots, found = redis.call('HGETALL', k_repeat_slots), 0
  for i = 2, #slots, 2 do
    local key = slots[i]
    if string.sub(key, 1, 1) ~= '~' and not redis.call('ZSCORE', k_repeats, key)
        and redis.call('EXISTS', prefix .. 'repeat:' .. key) == 1 then
      add(key, false)
      found = found + 1
      if found >= limit then break end
    end
  end
end
return out
