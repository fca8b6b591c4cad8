-- enqueue_flow: (new) -> waiting | pending
--
-- Admits a flow (docs/flows.md): a tree of jobs of one queue, in one indivisible step, all or
-- nothing. A node with children is written with state waiting, children_left = its number of
-- children, into waiting (score = admitted ms) and gets a flow:<id> HASH naming each child with
-- status '' (unfinished); a leaf goes to its lane's waiting set (includes/lanes.lua to_pending)
-- and wakes a worker. Each child's row names its parent (parent) and its failure policy
-- (on_failure). A flow spanning queues is admitted in one such step per queue, parents' steps
-- first (docs/flows.md): a child in another queue is named in its parent's flow:<id> as
-- '<id>@<queue>', and a child whose parent is in another queue has parent = '<id>@<queue>' (its
-- end reaches the parent through the outbox). Safety belt: every id is checked before the first
-- write; an id that exists, or repeats in the call, writes nothing (EMQCONFLICT), unless every
-- id exists with the parent given: a resent step (its reply lost) writes nothing and returns 0.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[2] waiting    ZSET    parents waiting on their children, score = admitted ms
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- KEYS[5] meta       HASH    queue flags (lanes)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] trace      string  the producer span's W3C traceparent, stored in each new row as
--                            trace; '' (OpenTelemetry not active) stores nothing
-- ARGV[4..] (id, name, payload, priority, max_attempts, lane, lifo, parent, on_failure, children, remote)*
--           one group per node, a parent before its children; lane '' = the default lane;
--           lifo '1' | ''; parent '' for the root, '<id>@<queue>' in another queue;
--           on_failure fail_parent | ignore | continue; children = the node's number of
--           children (all queues); remote = its children in other queues, '<id>@<queue>'
--           separated by spaces, or ''
-- Returns: the number of jobs admitted (0: a resent step, already admitted)
-- Errors: EMQCONFLICT <id> when an id exists or repeats in the call
-- Derives: job:<id> HASH, packed HASH (layout 3: includes/packed.lua), flow:<id> HASH, lane:<L>:pending ZSET, lanes:ring ZSET,
--   lane:default:active SET (when lane mode turns on), meta lifo_seq, events:archived STRING
--   (read only)
-- Includes: clock, events, lanes, rows, wake
local k_pending = KEYS[1]
local k_waiting = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_meta = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local trace = ARGV[3]
local GROUP = 11
local FIRST = 4  -- ARGV index of the first group

local seen, there, clash = {}, {}, false
for i = FIRST, #ARGV, GROUP do
  local id = ARGV[i]
  local row = prefix .. 'job:' .. id
  if seen[id] then
    clash = clash or id
  elseif redis.call('EXISTS', row) == 1
      or redis.call('HEXISTS', prefix .. 'packed', id) == 1 then  -- a packed job (layout 3)
    there[#there + 1] = id
    if (redis.call('HGET', row, 'parent') or '') ~= ARGV[i + 7] then clash = clash or id end
  end
  seen[id] = true
end
if not clash and #there * GROUP == #ARGV - (FIRST - 1) then return 0 end  -- resent: all there already
clash = clash or there[1]
if clash then
  return redis.error_reply('EMQCONFLICT ' .. clash .. ' exists (or repeats in the flow): '
    .. 'nothing was written')
end

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local ready, admitted = 0, 0
local records, order = {}, {}  -- flow:<parent> fields, written in batches at the end
local function listed(parent, kid)
  local r = records[parent]
  if not r then
    r = {}
    records[parent] = r
    order[#order + 1] = parent
  end
  r[#r + 1], r[#r + 2] = kid, ''
end
for i = FIRST, #ARGV, GROUP do
  local id, name, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local priority, max_attempts, lane, lifo = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local parent, policy, children = ARGV[i + 7], ARGV[i + 8], tonumber(ARGV[i + 9])
  local state = 'pending'
  if children > 0 then state = 'waiting' end
  local fields = row_fields(name, payload, state, priority, max_attempts, lane)
  if lifo == '1' then fields[#fields + 1], fields[#fields + 2] = 'lifo', '1' end
  if trace ~= '' then fields[#fields + 1], fields[#fields + 2] = 'trace', trace end
  if parent ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'parent', parent
    fields[#fields + 1], fields[#fields + 2] = 'on_failure', policy
    if not string.find(parent, '@', 1, true) then listed(parent, id) end
  end
  for kid in string.gmatch(ARGV[i + 10], '%S+') do listed(id, kid) end
  if children > 0 then
    fields[#fields + 1], fields[#fields + 2] = 'children_left', children
  end
  redis.call('HSET', prefix .. 'job:' .. id, unpack(fields))
  if children > 0 then
    redis.call('ZADD', k_waiting, now, id)
  else
    to_pending(k_pending, id, priority, lane, lifo)
    ready = ready + 1
  end
  admitted = admitted + 1
  emit('event', 'enqueued', 'job', id, 'attempts', 0, 'name', name, 'state', state)
end
for _, parent in ipairs(order) do
  local r = records[parent]
  for j = 1, #r, 1000 do
    redis.call('HSET', prefix .. 'flow:' .. parent, unpack(r, j, math.min(j + 999, #r)))
  end
end
wake(k_wake, ready)
return finish(admitted)
