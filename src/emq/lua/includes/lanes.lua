-- lanes: the lane helpers (docs/lanes.md): lane mode, each job's lane, the ring, lifo scores
-- Includes: layout, wake
--
-- use_lanes(prefix, k_meta, ...)  checks the queue's keyspace layout (check_layout), reads
--                       its lane mode (docs/lanes.md) and returns meta's concurrency and the
--                       other fields named, in order
-- DEFAULT_LANE          'default', the lane of a row without a lane field
-- lane_mode, lane_vtime, lane_ready, lane_freed  what use_lanes read (lane mode on; the
--                       ring's virtual time) and what to_pending and lane_release gather for
--                       lanes_flush (lanes that have work; freed slots per lane)
-- lane_of(field)       a row's lane field (false or '' for the default lane) -> lane name
-- lane_key(lane, what)  a key of one lane: lane:<L>:pending | active | rate
-- lane_pending_key(k_pending, lane)  the waiting set of a lane: pending for the default lane,
--                       lane:<L>:pending for the others
-- lanes_on(k_pending)   turns lane mode on: today's leased jobs join the default lane's
--                       active set, and the default lane joins the ring if it has work (in
--                       pending, or packed jobs: layout 3)
-- lifo_seq(n)           takes n numbers of the queue's lifo counter (meta lifo_seq, one
--                       HINCRBY) and returns the first
-- lifo_score(priority, seq)  a lifo job's score: priority - seq / 2^41 (seq capped at
--                       2^40 - 1), ahead of the FIFO jobs of its priority (score = priority),
--                       the newest lifo job first, never past the next priority; written
--                       with '%.17g' so the server parses back the exact double
-- to_pending(k_pending, id, priority, lane, lifo)  puts a job into its lane's waiting set
--                       (and its lane into the ring, at finish); lane is the row's field or
--                       false; lifo is the row's 'lifo' field: '1' gives it a fresh lifo score
-- lane_release(lane, id)  a leased job of lane leaves active: its slot is freed (one SREM
--                       per lane, in lanes_flush, in this same step)
-- lanes_flush()         writes what to_pending and lane_release gathered (finish calls it)
-- known_lanes()         every lane that may hold waiting jobs (ring, later, full, conf),
--                       the default lane first
local DEFAULT_LANE = 'default'
local lane_prefix, lane_mode, lane_vtime, queue_limited = '', false, '0', false
local lane_ready, lane_freed, released = {}, {}, 0

local function use_lanes(prefix, k_meta, ...)
  local m = redis.call('HMGET', k_meta, 'layout', 'lanes', 'vtime', 'concurrency', ...)
  check_layout(m[1], prefix)
  lane_prefix, lane_mode, lane_vtime = prefix, m[2] == '1', m[3] or '0'
  queue_limited = m[4] ~= false and m[4] ~= '0'
  return {unpack(m, 4)}
end

local function lane_of(field)  -- a row's lane field (false, '' or a name) -> the lane's name
  if not field or field == '' then return DEFAULT_LANE end
  return field
end

local function lane_key(lane, what)
  return lane_prefix .. 'lane:' .. lane .. ':' .. what
end

local function lane_pending_key(k_pending, lane)
  if lane == DEFAULT_LANE then return k_pending end
  return lane_key(lane, 'pending')
end

local function lanes_on(k_pending)
  redis.call('HSET', lane_prefix .. 'meta', 'lanes', '1')
  lane_mode = true
  local leased = redis.call('ZRANGE', lane_prefix .. 'active', 0, -1)
  for i = 1, #leased, 1000 do
    redis.call('SADD', lane_key(DEFAULT_LANE, 'active'),
      unpack(leased, i, math.min(i + 999, #leased)))
  end
  if redis.call('ZCARD', k_pending) > 0
      or redis.call('EXISTS', lane_prefix .. 'packed') == 1 then
    lane_ready[DEFAULT_LANE] = true
  end
end

local LIFO_STEP, LIFO_MAX = 2 ^ -41, 2 ^ 40 - 1

local function lifo_seq(n)
  return redis.call('HINCRBY', lane_prefix .. 'meta', 'lifo_seq', n) - n + 1
end

local function lifo_score(priority, seq)
  return string.format('%.17g', tonumber(priority) - math.min(seq, LIFO_MAX) * LIFO_STEP)
end

local function to_pending(k_pending, id, priority, lane, lifo)
  lane = lane_of(lane)
  if lifo == '1' then priority = lifo_score(priority, lifo_seq(1)) end
  if not lane_mode then
    if lane == DEFAULT_LANE then
      redis.call('ZADD', k_pending, priority, id)
      return
    end
    lanes_on(k_pending)
  end
  redis.call('ZADD', lane_pending_key(k_pending, lane), priority, id)
  lane_ready[lane] = true
end

local function lane_release(lane, id)
  released = released + 1
  if lane_mode then
    lane = lane_of(lane)
    local ids = lane_freed[lane]
    if not ids then
      ids = {}
      lane_freed[lane] = ids
    end
    ids[#ids + 1] = id
  end
end

local function lanes_flush()
  local names = {}
  for lane, ids in pairs(lane_freed) do
    names[#names + 1] = lane
    if ids ~= true then redis.call('SREM', lane_key(lane, 'active'), unpack(ids)) end
  end
  local k_full, k_ring = lane_prefix .. 'lanes:full', lane_prefix .. 'lanes:ring'
  local woken = 0
  if #names > 0 then
    local full = redis.call('SMISMEMBER', k_full, unpack(names))
    for i, lane in ipairs(names) do
      if full[i] == 1 then
        redis.call('SREM', k_full, lane)
        lane_ready[lane] = true
        woken = woken + 1
      end
    end
  end
  local ring = {}
  for lane in pairs(lane_ready) do
    ring[#ring + 1] = lane_vtime
    ring[#ring + 1] = lane
  end
  if #ring > 0 then redis.call('ZADD', k_ring, 'NX', unpack(ring)) end
  if queue_limited then woken = woken + released end
  wake(lane_prefix .. 'wake', woken)
  lane_ready, lane_freed, released = {}, {}, 0
end

local function known_lanes()
  local seen, names = {[DEFAULT_LANE] = true}, {DEFAULT_LANE}
  local p = lane_prefix .. 'lanes:'
  for _, list in ipairs({redis.call('ZRANGE', p .. 'ring', 0, -1),
      redis.call('ZRANGE', p .. 'later', 0, -1), redis.call('SMEMBERS', p .. 'full'),
      redis.call('HKEYS', p .. 'conf')}) do
    for _, lane in ipairs(list) do
      if not seen[lane] then
        seen[lane] = true
        names[#names + 1] = lane
      end
    end
  end
  return names
end
