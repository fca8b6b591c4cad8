-- flows: a flow's child ended, counted for its parent (docs/flows.md)
-- Includes: events, lanes, waiters, wake
--
-- flow_child_done(prefix, k_pending, parent, id, status, result, policy, now)  a child of
--                       a flow (docs/flows.md) ended: status completed | dead | cancelled |
--                       removed; counted once in flow:<parent> (a status already final is
--                       never counted again; a dead child with policy 'continue' stays
--                       unfinished); result (JSON text or '') kept in flow:<parent>:results;
--                       the waiting parent becomes pending when its children_left reaches 0,
--                       or dead when a child with policy fail_parent (the default) died (its
--                       own parent told in turn). A parent in another queue (the row's
--                       parent is '<id>@<queue>') is told through this queue's outbox: one
--                       entry per child, 'done:<id>' -> JSON {q, p, c, s, f, r}, written
--                       once (HSETNX: the first end counts, as in flow:<parent>) and
--                       delivered by deliver_flow in the parent's slot
-- flow_count(prefix, k_pending, parent, child, status, result, policy, now)  the parent's
--                       side of the above, in the parent's own slot (child is '<id>' or
--                       '<id>@<queue>'); returns false when it counted nothing
-- queue_of(prefix)      a queue's key prefix 'emq:{<queue>}:' -> '<queue>'
local flow_child_done

local function flow_count(prefix, k_pending, parent, id, status, result, policy, now)
  local k_flow = prefix .. 'flow:' .. parent
  if redis.call('HGET', k_flow, id) ~= '' then return false end  -- gone, or counted already
  local died = status ~= 'completed'
  if died and status ~= 'removed' and policy == 'continue' then return false end
  redis.call('HSET', k_flow, id, status)
  if result and result ~= '' then redis.call('HSET', k_flow .. ':results', id, result) end
  local prow = prefix .. 'job:' .. parent
  local left = redis.call('HINCRBY', prow, 'children_left', -1)
  local fails = died and status ~= 'removed' and policy ~= 'ignore'
  if left > 0 and not fails then return true end  -- the common case: one more child done
  if redis.call('HGET', prow, 'state') ~= 'waiting' then return true end
  if fails then
    local p = redis.call('HMGET', prow, 'waiters', 'parent', 'on_failure', 'attempts', 'name',
      'payload', 'stalled')
    local err = 'child ' .. id .. ' ' .. status
    redis.call('ZREM', prefix .. 'waiting', parent)
    redis.call('HSET', prow, 'state', 'dead', 'last_error', err, 'died_at', now)
    redis.call('ZADD', prefix .. 'dead', now, parent)
    redis.call('HINCRBY', prefix .. 'metrics', 'dead', 1)
    emit('event', 'dead', 'job', parent, 'attempts', p[4] or '0', 'error', err, 'name', p[5],
      'payload', p[6], 'stalled', p[7] or '0')
    tell_waiters(prefix, parent, p[1], 'dead', err)
    if p[2] then
      flow_child_done(prefix, k_pending, p[2], parent, 'dead', '', p[3], now)
    end
  else  -- the last child: the parent is ready
    local p = redis.call('HMGET', prow, 'priority', 'lane', 'lifo')
    redis.call('ZREM', prefix .. 'waiting', parent)
    redis.call('HSET', prow, 'state', 'pending')
    to_pending(k_pending, parent, p[1], p[2], p[3])
    wake(prefix .. 'wake', 1)
    emit('event', 'ready', 'job', parent)
  end
  return true
end

local function queue_of(prefix)  -- 'emq:{<queue>}:' -> '<queue>'
  return string.sub(prefix, 6, -3)
end

flow_child_done = function(prefix, k_pending, parent, id, status, result, policy, now)
  local at = string.find(parent, '@', 1, true)
  if not at then
    flow_count(prefix, k_pending, parent, id, status, result, policy, now)
    return
  end
  if status ~= 'completed' and status ~= 'removed' and policy == 'continue' then return end
  redis.call('HSETNX', prefix .. 'outbox', 'done:' .. id, cjson.encode({
    q = string.sub(parent, at + 1), p = string.sub(parent, 1, at - 1),
    c = id .. '@' .. queue_of(prefix), s = status, f = policy, r = result or ''}))
end
