-- pause: queue (or lane) running -> paused
--
-- Sets the pause flag that claim reads inside its own step, so no claim that starts after
-- this call returns can lease a job of the queue (lane = '') or of that lane. Jobs already
-- leased keep running. A lane's flag is kept in its settings (lanes:conf) and takes the lane
-- out of the ring; pausing a lane turns lane mode on.
--
-- KEYS[1] meta       HASH    queue flags (paused, lanes, vtime)
-- KEYS[2] events     STREAM  lifecycle events
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] lane       string  the lane to pause; '' = the whole queue
-- Returns: 1 if it was running, 0 if it was already paused (then no event is appended)
-- Errors: none
-- Derives: lanes:conf HASH, lanes:ring ZSET, lane:default:active SET (when lane mode turns
--   on), events:archived STRING (read only)
-- Includes: events, lanes
local k_meta = KEYS[1]
local k_events = KEYS[2]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local lane = ARGV[3]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

if lane == '' then
  if redis.call('HGET', k_meta, 'paused') == '1' then return finish(0) end  -- no event
  redis.call('HSET', k_meta, 'paused', '1')
  emit('event', 'paused')
  return finish(1)
end
if not lane_mode then lanes_on(prefix .. 'pending') end
local k_conf = prefix .. 'lanes:conf'
local conf = redis.call('HGET', k_conf, lane) or '1 0 0 0 0'
redis.call('ZREM', prefix .. 'lanes:ring', lane)
lane_ready[lane] = nil
if string.sub(conf, -1) == '1' then return finish(0) end  -- already paused: no event
redis.call('HSET', k_conf, lane, string.sub(conf, 1, -2) .. '1')
emit('event', 'lane_paused', 'lane', lane)
return finish(1)
