-- layout: the queue's keyspace layout (docs/keyspace.md, Layout versions)
-- Includes: none
--
-- LAYOUT                the keyspace layout these scripts read and write: 1
-- check_layout(stored, prefix)  refuses (EMQLAYOUT <prefix> <stored> <LAYOUT>) a queue whose
--                       meta 'layout' field names a newer layout; absent = layout 1. Every
--                       script of a queue calls it (most through use_lanes) before it writes
--                       anything, so a newer emq's queue is never changed by this one
-- use_layout(prefix)    reads meta's 'layout' and checks it, for a script that reads no other
--                       field of meta
local LAYOUT = 1

local function check_layout(stored, prefix)
  if stored and tonumber(stored) ~= LAYOUT then
    error(redis.error_reply('EMQLAYOUT ' .. prefix .. ' ' .. stored .. ' ' .. LAYOUT))
  end
end

local function use_layout(prefix)
  check_layout(redis.call('HGET', prefix .. 'meta', 'layout'), prefix)
end
