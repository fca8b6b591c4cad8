-- set_repeat: (no schedule) | schedule -> schedule (registered or updated)
--
-- Registers a repeating schedule under its key, or updates it. Idempotent: the same spec
-- again writes nothing (its next tick, counters and slot stay). A changed spec replaces the
-- spec, gets a new version (so a firer that planned with the old spec is refused by the CAS
-- in fire_repeats) and the next tick the caller computed. Safety belt: a next tick at or
-- below the last fired tick is refused (the caller recomputes above it), so no tick's job
-- id is ever made twice; a new schedule takes a free slot (0..4095) for its ticks' ids, and
-- one freed by unrepeat carries a floor (its removal time) below which no tick fires.
--
-- KEYS[1] repeats        ZSET    schedules, score = next tick ms
-- KEYS[2] repeat-slots  HASH    slot -> schedule key, or '~<ms>' once freed at that time
-- ARGV[1] prefix         string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] key            string  the schedule's key (checked by the caller)
-- ARGV[3] first          integer the next tick, ms (server clock), computed by the caller
-- ARGV[4] name           string  job name of every tick's job
-- ARGV[5] payload        string  JSON text
-- ARGV[6] every_ms       string  interval in ms, or '' for cron
-- ARGV[7] cron           string  five-field cron expression, or ''
-- ARGV[8] tz             string  IANA zone of the cron expression
-- ARGV[9] lane           string  lane of the jobs, '' for the default lane
-- ARGV[10] priority      integer priority of the jobs
-- ARGV[11] max_attempts  integer attempts of each job
-- ARGV[12] catch_up      string  'latest' | 'all'
-- ARGV[13] start_at      string  anchor ms, or '' (every_ms ticks are anchored at 0)
-- Returns: {0 same spec (nothing written) | 1 updated | 2 created | -1 first is not above
--   the last fired tick, next tick ms (the stored one for 0, first for 1 and 2, the last
--   fired tick for -1)}
-- Errors: EMQARG when the queue already has 4,096 schedules
-- Derives: meta HASH (read only), repeat:<key> HASH
-- Includes: clock, layout
local k_repeats = KEYS[1]
local k_repeat_slots = KEYS[2]
local prefix = ARGV[1]
local key = ARGV[2]
local first = tonumber(ARGV[3])
local name = ARGV[4]
local payload = ARGV[5]
local every_ms = ARGV[6]
local cron = ARGV[7]
local tz = ARGV[8]
local lane = ARGV[9]
local priority = ARGV[10]
local max_attempts = ARGV[11]
local catch_up = ARGV[12]
local start_at = ARGV[13]
use_layout(prefix)
local SPEC = {'name', 'payload', 'every_ms', 'cron', 'tz', 'lane', 'priority', 'max_attempts',
  'catch_up', 'start_at'}
local spec = {name, payload, every_ms, cron, tz, lane, priority, max_attempts, catch_up,
  start_at}
local MAX_SCHEDULES = 4096

local h = prefix .. 'repeat:' .. key
local cur = redis.call('HMGET', h, 'next', 'last_tick', unpack(SPEC))
local fields = {}
local same = true
for i, field in ipairs(SPEC) do
  fields[#fields + 1], fields[#fields + 2] = field, spec[i]
  if cur[2 + i] ~= spec[i] then same = false end
end
fields[#fields + 1], fields[#fields + 2] = 'next', first
fields[#fields + 1], fields[#fields + 2] = 'version', server_us()

if cur[1] then
  if same then return {0, tonumber(cur[1])} end
  local last = tonumber(cur[2] or '0')
  if first <= last then return {-1, last} end
  redis.call('HSET', h, unpack(fields))
  redis.call('ZADD', k_repeats, first, key)
  return {1, first}
end

if redis.call('ZCARD', k_repeats) >= MAX_SCHEDULES then
  return redis.error_reply('EMQARG the queue has ' .. MAX_SCHEDULES .. ' repeating ' ..
    'schedules already, the most it can hold; unrepeat one first')
end
-- a free slot: never used if any is left, else one freed by unrepeat (with its floor)
local start = tonumber(string.sub(redis.sha1hex(key), 1, 3), 16)
local slot, floor, freed, freed_at = nil, '0', nil, nil
for base = 0, MAX_SCHEDULES - 1, 256 do
  local probe = {}
  for i = 0, 255 do probe[i + 1] = (start + base + i) % MAX_SCHEDULES end
  local got = redis.call('HMGET', k_repeat_slots, unpack(probe))
  for i = 1, 256 do
    if not got[i] then
      slot = probe[i]
      break
    elseif not freed and string.sub(got[i], 1, 1) == '~' then
      freed, freed_at = probe[i], string.sub(got[i], 2)
    end
  end
  if slot then break end
end
if not slot then slot, floor = freed, freed_at end
fields[#fields + 1], fields[#fields + 2] = 'slot', slot
fields[#fields + 1], fields[#fields + 2] = 'floor', floor
fields[#fields + 1], fields[#fields + 2] = 'created_at', server_ms()
redis.call('HSET', h, unpack(fields))
redis.call('HSET', k_repeat_slots, slot, key)
redis.call('ZADD', k_repeats, first, key)
return {2, first}
