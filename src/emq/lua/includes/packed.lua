-- packed: waiting jobs of the common case as one packed entry, without a row (layout 3)
-- Includes: none
--
-- A job enqueued at priority 0, in the default lane, with no delay, dedup key, lifo or flow
-- waits in layout 3 as one field of packed (id -> entry) and its id in ready (a LIST, in
-- arrival order); claim makes its row. packed is the truth of membership: a packed job is
-- in no other location and has no row. ready may hold ids no longer in packed (tombstones:
-- the job was unpacked since); claim skips them. docs/keyspace.md, Layout versions.
--
-- pack_entry(name, max_attempts, trace, payload)  '<name> <max_attempts> <trace> <payload>'
--                       (trace may be ''); a name and a trace hold no space
-- unpack_entry(entry)   -> name, max_attempts, trace, payload; nil for an entry not in that
--                       shape (written by hand)
-- packable(layout, lanes, priority, delay, dedup, lane, lifo)  whether enqueue packs a job
-- unpack_job(prefix, id)  called by a script that touches a waiting job by id, before it reads
--                       the row: a packed job gets its row (state pending, name, payload,
--                       priority 0, max_attempts, trace) and joins pending at score 0 (its
--                       place: equal scores pop in id order), in this same step; its id stays
--                       in ready as a tombstone. One HGET when the job is not packed. Returns
--                       true when it unpacked the job (an entry not in the packed shape is
--                       left as it is: the claim drops it as missing)
-- id_before(a, b)       whether id a was minted before id b (byte order of same-length ids,
--                       compared byte by byte: Lua's '<' follows the server's locale)
-- pop_waiting(prefix, k_pending, n)  pops up to n jobs of the default lane in claim order:
--                       pending's members scored below 0, then score 0 and the packed jobs
--                       merged by id (FIFO), then pending's higher scores. Returns ids and a
--                       table of their entries (false for a job with a row). A tombstone, or
--                       an id seen twice in one call, is dropped; at most 8 rounds
-- drop_packed(prefix, limit)  deletes up to limit packed jobs (drain, obliterate): all at once
--                       when limit covers them, else popped from ready in order (a tombstone
--                       dropped without counting); returns how many it deleted
local function pack_entry(name, max_attempts, trace, payload)
  return name .. ' ' .. max_attempts .. ' ' .. trace .. ' ' .. payload
end

local function unpack_entry(entry)
  local a = string.find(entry, ' ', 1, true)
  local b = a and string.find(entry, ' ', a + 1, true)
  local c = b and string.find(entry, ' ', b + 1, true)
  if not c then return nil end
  return string.sub(entry, 1, a - 1), string.sub(entry, a + 1, b - 1),
    string.sub(entry, b + 1, c - 1), string.sub(entry, c + 1)
end

local function packable(layout, lanes, priority, delay, dedup, lane, lifo)
  return layout >= 3 and not lanes and delay == 0 and dedup == '' and lane == ''
    and lifo ~= '1' and tonumber(priority) == 0
end

local function unpack_job(prefix, id)
  local k_packed = prefix .. 'packed'
  local entry = redis.call('HGET', k_packed, id)
  if not entry then return false end
  local name, max_attempts, trace, payload = unpack_entry(entry)
  if not name then return false end
  local row = prefix .. 'job:' .. id
  if trace ~= '' then
    redis.call('HSET', row, 'state', 'pending', 'name', name, 'payload', payload, 'priority',
      '0', 'max_attempts', max_attempts, 'trace', trace)
  else
    redis.call('HSET', row, 'state', 'pending', 'name', name, 'payload', payload, 'priority',
      '0', 'max_attempts', max_attempts)
  end
  redis.call('HDEL', k_packed, id)
  redis.call('ZADD', prefix .. 'pending', 0, id)
  return true
end

local function id_before(a, b)
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return (x or 0) < (y or 0) end
  end
  return #a < #b
end

local function pop_waiting(prefix, k_pending, n)
  local k_ready, k_packed = prefix .. 'ready', prefix .. 'packed'
  local ids, entries, seen = {}, {}, {}
  for _ = 1, 8 do
    local want = n - #ids
    if want <= 0 then break end
    local z = redis.call('ZRANGE', k_pending, 0, want - 1, 'WITHSCORES')
    local l, popped = {}, false  -- popped: l came off ready by LPOP (no row waits to merge)
    if #z == 0 then
      l, popped = redis.call('LPOP', k_ready, want) or {}, true
    else
      l = redis.call('LRANGE', k_ready, 0, want - 1)
    end
    if #z == 0 and #l == 0 then break end
    local zi, li, order = 1, 1, {}  -- order: per pick, true from pending, false from ready
    while #order < want do
      local zid, lid = z[zi], l[li]
      if zid and (not lid or tonumber(z[zi + 1]) < 0
          or (tonumber(z[zi + 1]) == 0 and id_before(zid, lid))) then
        order[#order + 1] = true
        zi = zi + 2
      elseif lid then
        order[#order + 1] = false
        li = li + 1
      else
        break
      end
    end
    local zn, ln = (zi - 1) / 2, li - 1
    if zn > 0 then redis.call('ZPOPMIN', k_pending, zn) end
    local got = {}
    if ln > 0 then
      if not popped then redis.call('LPOP', k_ready, ln) end
      got = redis.call('HMGET', k_packed, unpack(l, 1, ln))
    end
    local gone = {}  -- packed ids leased in this round: one HDEL
    zi, li = 1, 1
    for _, from_pending in ipairs(order) do
      local id, entry = nil, false
      if from_pending then
        id = z[zi]
        zi = zi + 2
      else
        id, entry = l[li], got[li]
        li = li + 1
        if not entry then id = nil end  -- a tombstone
      end
      if id and not seen[id] then
        seen[id] = true
        ids[#ids + 1] = id
        entries[#ids] = entry
        if entry then gone[#gone + 1] = id end
      end
    end
    if #gone > 0 then redis.call('HDEL', k_packed, unpack(gone)) end
  end
  return ids, entries
end

local function drop_packed(prefix, limit)
  local k_packed, k_ready = prefix .. 'packed', prefix .. 'ready'
  local packed = redis.call('HLEN', k_packed)
  if packed <= limit then
    if packed > 0 or redis.call('EXISTS', k_ready) == 1 then redis.call('DEL', k_packed, k_ready) end
    return packed
  end
  local removed = 0
  for _ = 1, 1000 do  -- each round pops at least one id of ready
    local ids = redis.call('LPOP', k_ready, limit - removed)
    if not ids then break end
    local got = redis.call('HMGET', k_packed, unpack(ids))
    local gone = {}
    for i, id in ipairs(ids) do
      if got[i] then gone[#gone + 1] = id end
    end
    if #gone > 0 then removed = removed + redis.call('HDEL', k_packed, unpack(gone)) end
    if removed >= limit then break end
  end
  return removed
end
