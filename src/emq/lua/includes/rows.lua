-- rows: a job's row: the fields of a new one, and the safety belt of an edit of a waiting one
-- Includes: lanes, packed
--
-- row_fields(name, payload, state, priority, max_attempts, lane)  a new job row's fields
--                       for HSET (lane '' or false: the default lane, not stored); the
--                       caller appends its own (dedup, lifo, parent, repeat, ...). Fields at
--                       their start value are not stored (docs/keyspace.md): attempts,
--                       stalled and token are 0 until claim or the sweep writes them (read
--                       them as `or '0'`), and created_at is the id's mint time. Every row
--                       has state, name and payload: a script asks one of them whether the
--                       row exists.
-- waiting_job(k_pending, k_schedule, id, ...)  the safety belt of an edit of a waiting job:
--                       unpacks a packed job first (layout 3: it gets its row, in pending);
--                       reads the row's state, lane and the fields named; returns where
--                       ('pending' | 'schedule', its id really in that set), the lane's name
--                       and the fields (a table), or false and the error reply to return
--                       (EMQNOJOB; EMQNOTWAITING naming the state)
local function row_fields(name, payload, state, priority, max_attempts, lane)
  local fields = {'name', name, 'payload', payload, 'state', state, 'priority', priority,
    'max_attempts', max_attempts}
  if lane and lane ~= '' then fields[#fields + 1], fields[#fields + 2] = 'lane', lane end
  return fields
end

local function waiting_job(k_pending, k_schedule, id, ...)
  unpack_job(lane_prefix, id)
  local f = redis.call('HMGET', lane_prefix .. 'job:' .. id, 'state', 'lane', ...)
  if not f[1] then return false, redis.error_reply('EMQNOJOB ' .. id .. ' does not exist') end
  local lane = lane_of(f[2])
  local where = false
  if f[1] == 'pending' and redis.call('ZSCORE', lane_pending_key(k_pending, lane), id) then
    where = 'pending'
  elseif f[1] == 'scheduled' and redis.call('ZSCORE', k_schedule, id) then
    where = 'schedule'
  end
  if not where then
    return false, redis.error_reply('EMQNOTWAITING ' .. id .. ' is ' .. f[1] ..
      ', not pending or scheduled: nothing was changed')
  end
  return where, lane, {unpack(f, 3)}
end
