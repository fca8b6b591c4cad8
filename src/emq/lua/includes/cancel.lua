-- cancel: a job with a cancel ends dead, cancelled (docs/control.md, "Cancellation"), and a
-- cancelled flow's parent takes its unfinished children with it
-- Includes: events, flows, lanes, waiters
--
-- to_cancelled(prefix, k_dead, k_metrics, id, reason, from, attempts, waiters, now)
--                       a job with a cancel ends (cancel, or fail / delay / sweep of a job
--                       whose row has 'cancel'): the caller has taken it out of its set; here
--                       it joins dead with cancelled = reason, last_error 'cancelled' or
--                       'cancelled: <reason>', died_at = now, its 'cancel' field dropped;
--                       metrics cancelled + 1, a 'cancelled' event (from = where it was),
--                       result() waiters told 'cancelled'
-- cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics, kids, reason,
--                       now)  a waiting parent ended: each unfinished child of kids (its
--                       flow:<id> HGETALL) is cancelled (cancel_waiting, or a cancel
--                       request when leased); a child in another queue gets an outbox entry
--                       'cancel:<id>@<queue>' -> JSON {q, j, r}, sent on as a cancel
-- cancel_waiting(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics, id, f, reason,
--                       now)  a waiting, scheduled or waiting-on-children job leaves its set
--                       for dead, cancelled (to_cancelled); f is its row's HMGET of state,
--                       lane, attempts, waiters, cancel, cancelled, parent, on_failure. A
--                       flow's parent takes its unfinished children with it, in this step
--                       (a leased child gets a cancel request); a flow's child is counted
--                       for its parent. Returns where the job was, or false (in none)
local function to_cancelled(prefix, k_dead, k_metrics, id, reason, from, attempts, waiters, now)
  local row = prefix .. 'job:' .. id
  local err = 'cancelled'
  if reason ~= '' then err = err .. ': ' .. reason end
  redis.call('HSET', row, 'state', 'dead', 'cancelled', reason, 'last_error', err,
    'died_at', now)
  redis.call('HDEL', row, 'cancel')
  redis.call('ZADD', k_dead, now, id)
  redis.call('HINCRBY', k_metrics, 'cancelled', 1)
  emit('event', 'cancelled', 'job', id, 'from', from, 'reason', reason, 'attempts',
    attempts or '0')
  tell_waiters(prefix, id, waiters, 'cancelled', err)
end

local cancel_waiting

local function cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics,
    kids, reason, now)
  for i = 1, #kids, 2 do
    local kid = kids[i]
    if kids[i + 1] ~= '' then
    elseif string.find(kid, '@', 1, true) then  -- in another queue: through the outbox
      redis.call('HSET', prefix .. 'outbox', 'cancel:' .. kid, cjson.encode({
        q = string.match(kid, '@(.*)$'), j = string.match(kid, '^(.-)@'), r = reason}))
    else
      local g = redis.call('HMGET', prefix .. 'job:' .. kid, 'state', 'lane', 'attempts',
        'waiters', 'cancel', 'cancelled', 'parent', 'on_failure')
      if g[1] and not cancel_waiting(prefix, k_pending, k_schedule,
          k_active, k_dead, k_metrics, kid, g, reason, now) and redis.call('ZSCORE', k_active, kid)
          and not g[5] then
        redis.call('HSET', prefix .. 'job:' .. kid, 'cancel', reason)
        emit('event', 'cancel_requested', 'job', kid, 'reason', reason, 'attempts',
          g[3] or '0')
      end
    end
  end
end

cancel_waiting = function(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics,
    job, f, reason, now)
  local from = false
  if redis.call('ZREM', lane_pending_key(k_pending, lane_of(f[2])), job) == 1 then
    from = 'pending'
  elseif redis.call('ZREM', k_schedule, job) == 1 then
    from = 'schedule'
  elseif redis.call('ZREM', prefix .. 'waiting', job) == 1 then
    from = 'waiting'
  end
  if not from then return false end
  to_cancelled(prefix, k_dead, k_metrics, job, reason, from, f[3], f[4], now)
  if from == 'waiting' then
    cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics,
      redis.call('HGETALL', prefix .. 'flow:' .. job), reason, now)
  end
  if f[7] then flow_child_done(prefix, k_pending, f[7], job, 'cancelled', '', f[8], now) end
  return from
end
