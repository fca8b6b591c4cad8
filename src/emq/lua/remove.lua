-- remove: pending | active | schedule | waiting | dead | completed (kept) -> (removed: row
--   deleted)
--
-- Deletes one job wherever it is, a kept completed job too (its result with it). A worker
-- holding its lease gets LeaseLost on its next extend or complete. Safety belt: the id leaves
-- every location set (its lane's waiting set and, if leased, its lane's active set, freeing
-- the slot) and its row and dedup key in this one step; result() waiters are told 'removed'.
-- Flows (docs/flows.md): a removed child is counted for its parent as 'removed' (like a
-- child with on_failure ignore); a removed waiting parent's unfinished children are
-- cancelled in this same step (reason 'parent removed'), and a parent's flow:<id> record
-- goes with it.
-- At maxmemory (allow-oom): sent again with maxlen 0 after the server refused the plain call
--   for memory: no event; what it still writes (a flow's count, result() waiters told) is a
--   few bytes next to the row it deletes (a removed waiting parent's children, cancelled,
--   keep their rows).
--
-- KEYS[1] pending    ZSET    waiting jobs
-- KEYS[2] active     ZSET    leased jobs
-- KEYS[3] schedule   ZSET    delayed jobs
-- KEYS[4] dead       ZSET    dead jobs
-- KEYS[5] events     STREAM  lifecycle events
-- KEYS[6] meta       HASH    queue flags (lanes, vtime, concurrency)
-- KEYS[7] completed  ZSET    kept completed jobs
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job to remove
-- Returns: where it was removed from: 'pending' | 'active' | 'schedule' | 'waiting' | 'dead' |
--   'completed' (a kept completed job)
-- Errors: EMQNOJOB <id> when no row exists
-- Derives: packed HASH (a packed job is unpacked first: includes/packed.lua),
--   job:<id> HASH, de:<dedup> STRING, lane:<L>:pending ZSET, lane:<L>:active SET,
--   lanes:full SET, lanes:ring ZSET, wake LIST, done:<id> LIST (result() waiters),
--   events:archived STRING (read only), waiting ZSET, metrics HASH, flow:<id> HASH,
--   flow:<id>:results HASH, flow:<parent> HASH, flow:<parent>:results HASH, logs:<id> LIST
--   (the job's log lines go with it)
-- Flags: allow-oom
-- Includes: cancel, clock, events, flows, lanes, packed, waiters
local k_pending = KEYS[1]
local k_active = KEYS[2]
local k_schedule = KEYS[3]
local k_dead = KEYS[4]
local k_events = KEYS[5]
local k_meta = KEYS[6]
local k_completed = KEYS[7]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)
unpack_job(prefix, id)  -- a packed waiting job (layout 3) gets its row first

local row = prefix .. 'job:' .. id
local f = redis.call('HMGET', row, 'attempts', 'dedup', 'lane', 'state', 'waiters', 'parent',
  'on_failure', 'children_left')
if not f[4] then return redis.error_reply('EMQNOJOB ' .. id .. ' does not exist') end
local where = ''
local lane = lane_of(f[3])
local sets = {pending = lane_pending_key(k_pending, lane), active = k_active,
  schedule = k_schedule, dead = k_dead}
for _, name in ipairs({'pending', 'active', 'schedule', 'dead'}) do
  if redis.call('ZREM', sets[name], id) == 1 then where = name end
end
if redis.call('ZREM', prefix .. 'waiting', id) == 1 then where = 'waiting' end
if f[4] == 'completed' then
  redis.call('ZREM', k_completed, id)
  where = 'completed'
end
if where == 'active' then lane_release(f[3], id) end
if f[5] then tell_waiters(prefix, id, f[5], 'removed', '') end
if f[2] and redis.call('GET', prefix .. 'de:' .. f[2]) == id then
  redis.call('DEL', prefix .. 'de:' .. f[2])
end
local now = server_ms()
if f[8] then  -- a flow's parent: its unfinished children are cancelled, its record goes
  local kids = redis.call('HGETALL', prefix .. 'flow:' .. id)
  redis.call('DEL', prefix .. 'flow:' .. id, prefix .. 'flow:' .. id .. ':results')
  if where == 'waiting' then
    cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, prefix .. 'metrics',
      kids, 'parent removed', now)
  end
end
if f[6] then flow_child_done(prefix, k_pending, f[6], id, 'removed', '', f[7], now) end
redis.call('DEL', row, prefix .. 'logs:' .. id)
emit('event', 'removed', 'job', id, 'attempts', f[1] or '0', 'from', where)
return finish(where)
