-- layout: the queue's keyspace layout (docs/keyspace.md, Layout versions)
-- Includes: none
--
-- LAYOUT                the newest keyspace layout these scripts read and write: 3. They
--                       serve layouts 1 and 2 as well (a queue no emq upgraded yet): 2 differs
--                       from 1 in how a call's events are appended (includes/events.lua), 3
--                       from 2 in that enqueue may pack a waiting job (includes/packed.lua)
-- queue_layout          the layout check_layout read: 1 until a script calls it
-- check_layout(stored, prefix)  refuses (EMQLAYOUT <prefix> <stored> <LAYOUT>) a queue whose
--                       meta 'layout' field names a layout newer than LAYOUT; absent = 1.
--                       Every script of a queue calls it (most through use_lanes) before it
--                       writes anything, so a newer emq's queue is never changed by this one
-- use_layout(prefix)    reads meta's 'layout' and checks it, for a script that reads no other
--                       field of meta
-- new_queue_layout(prefix)  a queue's first enqueue: when none of the queue's meta, pending,
--                       active, schedule, dead, events and metrics exist (and the field was
--                       absent), writes meta 'layout' = LAYOUT, so a queue this emq makes is in
--                       the newest layout from its first job on; call it after every check
local LAYOUT = 3
local queue_layout, layout_stored = 1, false

local function check_layout(stored, prefix)
  layout_stored = stored
  if stored then
    local n = tonumber(stored)
    if not n or n > LAYOUT then
      error(redis.error_reply('EMQLAYOUT ' .. prefix .. ' ' .. stored .. ' ' .. LAYOUT))
    end
    queue_layout = n
  end
end

local function use_layout(prefix)
  check_layout(redis.call('HGET', prefix .. 'meta', 'layout'), prefix)
end

local function new_queue_layout(prefix)
  if layout_stored then return end
  if redis.call('EXISTS', prefix .. 'meta', prefix .. 'pending', prefix .. 'active',
      prefix .. 'schedule', prefix .. 'dead', prefix .. 'events', prefix .. 'metrics') == 0 then
    redis.call('HSET', prefix .. 'meta', 'layout', LAYOUT)
    queue_layout, layout_stored = LAYOUT, tostring(LAYOUT)
  end
end
