-- redrive: dead -> pending | waiting
--
-- Gives dead jobs a fresh start: by id, or the oldest `all_limit` dead jobs when no ids are
-- given. attempts and stalled are reset to 0 unless keep_counters = 1 (the token is never
-- reset, so a stale worker's old token can not match a later lease). Safety belt: an id not
-- in dead at this instant is skipped, so a concurrent redrive or remove moves nothing twice;
-- each job goes back to its own lane. A cancelled job (cancel.lua) is redriven like any other:
-- its 'cancelled' and 'cancel' fields are dropped, so it runs normally. A flow's parent
-- (docs/flows.md) with children still unfinished (children_left > 0) goes back to waiting,
-- not pending: it runs once they finished, never before.
--
-- KEYS[1] dead           ZSET    dead jobs, score = ms of death
-- KEYS[2] pending        ZSET    waiting jobs, score = priority
-- KEYS[3] events         STREAM  lifecycle events
-- KEYS[4] wake           LIST    wake-up tokens for parked workers
-- KEYS[5] meta           HASH    queue flags (lanes, vtime)
-- ARGV[1] prefix         string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen         integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] keep_counters  integer 1 = keep attempts and stalled, 0 = reset them
-- ARGV[4] all_limit      integer with no ids: redrive this many oldest dead jobs; else 0
-- ARGV[5..] (id)*        the jobs to redrive
-- Returns: array of the redriven ids
-- Errors: none
-- Derives: job:<id> HASH, lane:<L>:pending ZSET, lanes:ring ZSET, waiting ZSET,
--   events:archived STRING (read only)
-- Includes: clock, events, lanes, wake
local k_dead = KEYS[1]
local k_pending = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_meta = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local keep_counters = ARGV[3]
local all_limit = tonumber(ARGV[4])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local ids = {}
if all_limit > 0 then
  ids = redis.call('ZRANGE', k_dead, 0, all_limit - 1)
else
  for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local out, ready = {}, 0
for _, id in ipairs(ids) do
  local row = prefix .. 'job:' .. id
  if redis.call('ZREM', k_dead, id) == 1 then
    local f = redis.call('HMGET', row, 'priority', 'lane', 'lifo', 'children_left')
    if f[1] then
      if keep_counters ~= '1' then redis.call('HSET', row, 'attempts', 0, 'stalled', 0) end
      redis.call('HDEL', row, 'died_at', 'cancel', 'cancelled')  -- a cancelled job runs again
      local to = 'pending'
      if tonumber(f[4] or '0') > 0 then  -- a parent whose children are not all done
        to = 'waiting'
        redis.call('ZADD', prefix .. 'waiting', server_ms(), id)
      else
        to_pending(k_pending, id, f[1], f[2], f[3])
        ready = ready + 1
      end
      redis.call('HSET', row, 'state', to)
      out[#out + 1] = id
      emit('event', 'redriven', 'job', id, 'attempts',
        redis.call('HGET', row, 'attempts') or '0', 'to', to)
    end
  end
end
wake(k_wake, ready)
return finish(out)
