-- due: scheduled jobs whose run-at time has come move to pending (claim and promote)
-- Includes: events, lanes
--
-- promote_due(prefix, k_schedule, k_pending, now, limit, promoted, missing)  moves at most
--                       limit jobs of schedule whose score (run-at ms) is <= now to their
--                       lane's waiting set (to_pending), state pending, a 'promoted' event
--                       each, their ids appended to promoted (false: not kept); an id found
--                       without its row leaves schedule, is appended to missing and gets a
--                       'missing' event (from schedule). ZREM and ZADD are in the caller's
--                       one step.
local function promote_due(prefix, k_schedule, k_pending, now, limit, promoted, missing)
  local due = redis.call('ZRANGEBYSCORE', k_schedule, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    local row = prefix .. 'job:' .. id
    redis.call('ZREM', k_schedule, id)
    local f = redis.call('HMGET', row, 'priority', 'lane', 'lifo')
    if f[1] then
      to_pending(k_pending, id, f[1], f[2], f[3])
      redis.call('HSET', row, 'state', 'pending')
      if promoted then promoted[#promoted + 1] = id end
      emit('event', 'promoted', 'job', id)
    else
      missing[#missing + 1] = id
      emit('event', 'missing', 'job', id, 'from', 'schedule')
    end
  end
end
