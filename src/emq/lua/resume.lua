-- resume: queue (or lane) paused -> running
--
-- Clears the pause flag of the queue (lane = '') or of a lane, and wakes parked workers. A
-- resumed lane with waiting jobs rejoins the ring at the current pass; a lane whose settings
-- are all defaults again has its settings entry deleted.
--
-- KEYS[1] meta       HASH    queue flags (paused, lanes, vtime)
-- KEYS[2] events     STREAM  lifecycle events
-- KEYS[3] wake       LIST    wake-up tokens for parked workers
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] lane       string  the lane to resume; '' = the whole queue
-- Returns: 1 if it was paused, 0 if it was running (then no event is appended)
-- Errors: none
-- Derives: lanes:conf HASH, lanes:ring ZSET, events:archived STRING (read only)
-- Includes: events, lanes, wake
local k_meta = KEYS[1]
local k_events = KEYS[2]
local k_wake = KEYS[3]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local lane = ARGV[3]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local changed = 0
if lane == '' then
  changed = redis.call('HDEL', k_meta, 'paused')
  if changed == 1 then emit('event', 'resumed') end
else
  local k_conf = prefix .. 'lanes:conf'
  local conf = redis.call('HGET', k_conf, lane)
  if conf and string.sub(conf, -1) == '1' then
    changed = 1
    conf = string.sub(conf, 1, -2) .. '0'
    if conf == '1 0 0 0 0' then
      redis.call('HDEL', k_conf, lane)
    else
      redis.call('HSET', k_conf, lane, conf)
    end
  end
  if lane_mode then lane_ready[lane] = true end
  if changed == 1 then emit('event', 'lane_resumed', 'lane', lane) end
end
wake(k_wake, 32)  -- every parked worker
return finish(changed)
