-- fire_repeats: (new) -> pending, for each due tick of a repeating schedule
--
-- Fires ticks the caller computed from due_repeats' reply (cron arithmetic cannot run in
-- Lua). Each group is one tick of one schedule: it fires only if the schedule still has the
-- version and the next tick the caller planned from (a compare-and-set: of any number of
-- firers planning the same tick, one fires it and the others are refused 'moved'), and only
-- if the server clock has reached the tick ('early' otherwise: never fired before its time).
-- A fired tick makes one job, exactly as enqueue makes a waiting one (row, its lane's
-- waiting set, event 'enqueued' with the schedule's key in 'repeat', wake-ups), with the id
-- snowflake(tick, node 1023, the schedule's slot) built here from the tick alone, so the
-- same tick can never make two jobs: an id that already exists writes no job ('exists').
-- Then the schedule's next tick becomes the group's following tick, and the ticks the
-- caller skipped (catch_up 'latest') are counted, with a 'repeat_skipped' event.
-- A group with tick 0 parks a schedule the caller found unfirable (its stored state is not
-- one repeat() writes: a hand edit, a partial restore): under the same compare-and-set on
-- the version and next as stored ('' for a missing field), its due score moves to following
-- (the caller's back-off), or its due entry is dropped when it has no row ('parked'). A
-- firing group whose row cannot make a job (slot, floor, priority or max_attempts not a
-- number, name or payload missing) writes no job and is parked backoff ms ahead ('broken'):
-- one schedule's data never refuses the call or stops the others.
--
-- KEYS[1] repeats    ZSET    schedules, score = next tick ms
-- KEYS[2] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- KEYS[5] meta       HASH    queue flags (lane mode)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] backoff    integer ms a schedule found broken here is parked for
-- ARGV[4..] (key, version, expect, tick, following, skipped)*  one group per tick: fire tick
--           (ms) if the schedule's next is expect (ms), then set next to following (ms) and
--           add skipped to its count of ticks not fired; tick 0: park it (expect is its next
--           as read, following the due score to park it at)
-- Returns: {now ms, earliest due score ms after this call or -1}, then per group: answer,
--   job id or '': 'fired' (a job was made), 'exists' (its id exists: no job written),
--   'floor' (at or below its slot's floor: not fired), 'moved' (another call advanced or
--   changed the schedule), 'early' (the tick is after the server's now), 'gone' (removed),
--   'broken' (its row cannot make a job: parked), 'parked' (a park group's schedule parked)
-- Errors: EMQARG when a firing group's ticks are not numbers in order (tick < expect or
--   following <= tick), or a park group's following is not a number: a caller's bug
-- Derives: repeat:<key> HASH, job:<id> HASH, lane:<L>:pending ZSET, lanes:ring ZSET,
--   lane:default:active SET (when lane mode turns on), events:archived STRING (read only)
-- Includes: clock, events, lanes, rows, wake
local k_repeats = KEYS[1]
local k_pending = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_meta = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local backoff = tonumber(ARGV[3])
local GROUP = 6
local FIRST = 4
local EPOCH_MS = 1704067200000
local B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

local now = server_ms()  -- first: events' stream ids are read from the clock at the start
use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

-- 'JOB' + 11 base62 digits of (tick - epoch) << 22 | 1023 << 12 | slot, in integer steps
-- that stay below 2^53 (a double holds the 63-bit value only approximately): the value is
-- kept as hi * 2^22 + lo with lo < 2^22, and divided by 62 one limb at a time.
local function tick_id(tick, slot)
  local hi, lo, digits = tick - EPOCH_MS, 1023 * 4096 + slot, {}
  for d = 11, 1, -1 do
    local rh = hi % 62
    hi = (hi - rh) / 62
    local x = rh * 4194304 + lo
    local r = x % 62
    lo = (x - r) / 62
    digits[d] = string.sub(B62, r + 1, r + 1)
  end
  return 'JOB' .. table.concat(digits)
end

for i = FIRST, #ARGV, GROUP do  -- refuse a bad call before the first write
  local expect, tick, following = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]),
    tonumber(ARGV[i + 4])
  local bad = not following  -- a park group (tick 0): only its following must be a number
  if tick ~= 0 then
    bad = not (expect and tick and following) or tick < expect or following <= tick
  end
  if bad then
    return redis.error_reply('EMQARG ticks out of order for ' .. ARGV[i] .. ': ' ..
      ARGV[i + 2] .. ', ' .. ARGV[i + 3] .. ', ' .. ARGV[i + 4])
  end
end

-- a schedule whose stored state cannot be fired: its due score moves to at (a back-off), or,
-- without a row, its due entry goes
local function park(key, h, at)
  if redis.call('EXISTS', h) == 1 then
    redis.call('ZADD', k_repeats, at, key)
  else
    redis.call('ZREM', k_repeats, key)
  end
end

-- the row's fields a job is made of are there and numbers where they must be
local function can_fire(s)
  local slot = tonumber(s[3])
  return slot and slot >= 0 and slot < 4096 and slot % 1 == 0 and tonumber(s[4]) and s[5]
    and s[6] and tonumber(s[8]) and tonumber(s[9])
end

local out = {now, -1}
local ready = 0
for i = FIRST, #ARGV, GROUP do
  local key, version = ARGV[i], ARGV[i + 1]
  local expect, tick = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local following, skipped = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local h = prefix .. 'repeat:' .. key
  local s = redis.call('HMGET', h, 'version', 'next', 'slot', 'floor', 'name', 'payload',
    'lane', 'priority', 'max_attempts')
  local answer, id = 'gone', ''
  if tick == 0 then
    answer = 'moved'
    if (s[1] or '') == version and (s[2] or '') == ARGV[i + 2] then
      park(key, h, following)
      answer = 'parked'
    end
  elseif not s[1] then
    answer = 'gone'
  elseif s[1] ~= version or tonumber(s[2]) ~= expect then
    answer = 'moved'
  elseif tick > now then
    answer = 'early'
  elseif not can_fire(s) then
    park(key, h, now + backoff)
    answer = 'broken'
  else
    if tick <= tonumber(s[4]) then
      answer, skipped = 'floor', skipped + 1
    else
      id = tick_id(tick, tonumber(s[3]))
      local row = prefix .. 'job:' .. id
      answer = 'exists'
      if redis.call('EXISTS', row) == 0 then
        answer = 'fired'
        local name, priority, lane = s[5], tonumber(s[8]), s[7]
        local fields = row_fields(name, s[6], 'pending', priority, s[9], lane)
        fields[#fields + 1], fields[#fields + 2] = 'repeat', key
        redis.call('HSET', row, unpack(fields))
        to_pending(k_pending, id, priority, lane)
        ready = ready + 1
        emit('event', 'enqueued', 'job', id, 'attempts', 0, 'name', name, 'state', 'pending',
          'repeat', key)
        redis.call('HSET', h, 'last_id', id)
        redis.call('HINCRBY', h, 'fired', 1)
      end
      redis.call('HSET', h, 'last_tick', tick)
    end
    redis.call('HSET', h, 'next', following)
    redis.call('ZADD', k_repeats, following, key)
    if skipped > 0 then
      redis.call('HINCRBY', h, 'skipped', skipped)
      emit('event', 'repeat_skipped', 'repeat', key, 'skipped', skipped, 'tick', tick)
    end
  end
  out[#out + 1] = answer
  out[#out + 1] = id
end
local head = redis.call('ZRANGE', k_repeats, 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
wake(k_wake, ready)
return finish(out)
