-- settings: queue settings -> queue settings (stored with the queue, read by every process)
--
-- Stores and reads the settings that describe the queue (docs/control.md, Queue settings):
-- result TTL, retention, durability level, max attempts default, event cap. 'init' stores the
-- given fields only if the queue has no settings yet (the first process to open the queue
-- with explicit options decides); 'set' replaces the given fields (Queue.configure). Either
-- way the reply is what is stored after the step, so a process reads and (maybe) stores in one
-- indivisible step and two first openers cannot both win. No job changes: no event.
--
-- KEYS[1] settings   HASH    setting name -> stored text
-- KEYS[2] meta       HASH    queue flags (layout)
-- ARGV[1] mode       string  'init' | 'set'
-- ARGV[2..] (name, text)*  the settings to store
-- Returns: array, the stored (name, text) pairs after the step
-- Errors: none
-- Derives: nothing
-- Includes: layout
local k_settings = KEYS[1]
local k_meta = KEYS[2]
local mode = ARGV[1]
check_layout(redis.call('HGET', k_meta, 'layout'), string.sub(k_meta, 1, -5))

if #ARGV > 1 and (mode == 'set' or redis.call('EXISTS', k_settings) == 0) then
  redis.call('HSET', k_settings, unpack(ARGV, 2))
end
return redis.call('HGETALL', k_settings)
