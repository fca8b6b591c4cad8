-- lanes: (read only) -> a listing of the queue's limits and lanes
--
-- Reads, at one instant, the queue's limits and every lane that has waiting or leased jobs or
-- settings: what Queue.lanes() and the invariant checks show. Writes nothing.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane
-- KEYS[2] active     ZSET    leased jobs
-- KEYS[3] meta       HASH    queue flags and limits
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] leased     integer 1 = also find lanes that only have leased jobs (reads the row of
--                            every leased job); 0 = lanes with waiting jobs or settings only
-- Returns: {now ms, lane mode 0|1, paused 0|1, concurrency, rate 'max:per' or '',
--          lane_concurrency, lane_rate, held_until ms, leased jobs, limited_until ms (the
--          queue's next rate slot when it was last limited)}, then per lane: name, waiting, leased, settings 'weight concurrency
--          max per paused' or '', held until ms or '', 1 if parked at its concurrency limit,
--          pass in the ring or ''
-- Errors: none
-- Derives: lanes:ring ZSET, lanes:later ZSET, lanes:full SET, lanes:conf HASH,
--   lane:<L>:pending ZSET, lane:<L>:active SET, job:<id> HASH, packed HASH (read only, all)
-- Includes: clock, lanes
local k_pending = KEYS[1]
local k_active = KEYS[2]
local k_meta = KEYS[3]
local prefix = ARGV[1]
local leased = ARGV[2]

local m = use_lanes(prefix, k_meta, 'paused', 'rate', 'lane_concurrency', 'lane_rate',
  'held_until', 'limited_until')
local now = server_ms()
-- the waiting jobs of a lane: the default lane's include the packed ones (layout 3)
local function waiting_in(lane)
  local n = redis.call('ZCARD', lane_pending_key(k_pending, lane))
  if lane == DEFAULT_LANE then n = n + redis.call('HLEN', prefix .. 'packed') end
  return n
end
local out = {now, lane_mode and 1 or 0, m[2] == '1' and 1 or 0, m[1] or '0', m[3] or '',
  m[4] or '0', m[5] or '', m[6] or '0', redis.call('ZCARD', k_active), m[7] or '0'}
if not lane_mode then
  local waiting = waiting_in(DEFAULT_LANE)
  if waiting > 0 or out[9] > 0 then
    for _, v in ipairs({DEFAULT_LANE, waiting, out[9], '', '', 0, ''}) do out[#out + 1] = v end
  end
  return out
end
local names, seen = known_lanes(), {}
for _, lane in ipairs(names) do seen[lane] = true end
local active = {}
if leased == '1' then active = redis.call('ZRANGE', k_active, 0, -1) end
for _, id in ipairs(active) do
  local lane = lane_of(redis.call('HGET', prefix .. 'job:' .. id, 'lane'))
  if not seen[lane] then
    seen[lane] = true
    names[#names + 1] = lane
  end
end
local p = prefix .. 'lanes:'
for _, lane in ipairs(names) do
  local waiting = waiting_in(lane)
  local running = redis.call('SCARD', lane_key(lane, 'active'))
  local conf = redis.call('HGET', p .. 'conf', lane)
  if waiting > 0 or running > 0 or conf then
    local row = {lane, waiting, running, conf or '', redis.call('ZSCORE', p .. 'later', lane) or '',
      redis.call('SISMEMBER', p .. 'full', lane), redis.call('ZSCORE', p .. 'ring', lane) or ''}
    for _, v in ipairs(row) do out[#out + 1] = v end
  end
end
return out
