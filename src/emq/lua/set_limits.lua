-- set_limits: limits -> limits (the queue's, or one lane's, replaced as a whole)
--
-- Sets every limit of its target at once: what is not given (0) is cleared. For the queue
-- (lane = ''): concurrency, rate, and the per-lane defaults lane_concurrency and lane_rate
-- (used by every lane without its own). For a lane: its concurrency, rate and weight (its
-- pause flag is kept). Claim reads them inside its own step, so every worker and producer sees
-- the new limits at the next claim. Lanes parked at their concurrency limit go back to the
-- ring (the next claim recounts them), and parked workers are woken. Per-lane settings or
-- defaults turn lane mode on.
--
-- KEYS[1] meta              HASH    queue flags and limits
-- KEYS[2] events            STREAM  lifecycle events
-- KEYS[3] wake              LIST    wake-up tokens for parked workers
-- ARGV[1] prefix            string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen            integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] lane              string  the lane whose limits these are; '' = the queue
-- ARGV[4] concurrency       integer most leased jobs at once; 0 = no limit
-- ARGV[5] rate_max          integer most claims in any rate_per ms; 0 = no limit
-- ARGV[6] rate_per          integer the rate's window, ms (0 when rate_max is 0)
-- ARGV[7] weight            integer a lane's share of turns, 1..1000 (1 for the queue)
-- ARGV[8] lane_concurrency  integer per-lane default concurrency (queue only); 0 = none
-- ARGV[9] lane_rate_max     integer per-lane default rate max (queue only); 0 = none
-- ARGV[10] lane_rate_per    integer per-lane default rate window, ms
-- Returns: 1
-- Errors: none
-- Derives: lanes:conf HASH, lanes:full SET, lanes:ring ZSET, lane:default:active SET (when
--   lane mode turns on), events:archived STRING (read only)
-- Includes: events, lanes, wake
local k_meta = KEYS[1]
local k_events = KEYS[2]
local k_wake = KEYS[3]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local lane = ARGV[3]
local concurrency = ARGV[4]
local rate_max = ARGV[5]
local rate_per = ARGV[6]
local weight = ARGV[7]
local lane_concurrency = ARGV[8]
local lane_rate_max = ARGV[9]
local lane_rate_per = ARGV[10]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local function put(field, value, set)
  if set then
    redis.call('HSET', k_meta, field, value)
  else
    redis.call('HDEL', k_meta, field)
  end
end

local k_full = prefix .. 'lanes:full'
if lane == '' then
  put('concurrency', concurrency, concurrency ~= '0')
  put('rate', rate_max .. ':' .. rate_per, rate_max ~= '0')
  put('lane_concurrency', lane_concurrency, lane_concurrency ~= '0')
  put('lane_rate', lane_rate_max .. ':' .. lane_rate_per, lane_rate_max ~= '0')
  if not lane_mode and (lane_concurrency ~= '0' or lane_rate_max ~= '0') then
    lanes_on(prefix .. 'pending')
  end
  for _, parked in ipairs(redis.call('SMEMBERS', k_full)) do lane_freed[parked] = true end
  emit('event', 'limits_set', 'lane', '*', 'concurrency', concurrency,
    'rate', rate_max .. ':' .. rate_per, 'weight', weight, 'lane_concurrency', lane_concurrency,
    'lane_rate', lane_rate_max .. ':' .. lane_rate_per)
else
  if not lane_mode then lanes_on(prefix .. 'pending') end
  local k_conf = prefix .. 'lanes:conf'
  local old = redis.call('HGET', k_conf, lane) or '1 0 0 0 0'
  local conf = table.concat({weight, concurrency, rate_max, rate_per, string.sub(old, -1)}, ' ')
  if conf == '1 0 0 0 0' then
    redis.call('HDEL', k_conf, lane)
  else
    redis.call('HSET', k_conf, lane, conf)
  end
  lane_freed[lane] = true
  emit('event', 'limits_set', 'lane', lane, 'concurrency', concurrency,
    'rate', rate_max .. ':' .. rate_per, 'weight', weight, 'lane_concurrency', '0',
    'lane_rate', '0:0')
end
wake(k_wake, 32)
return finish(1)
