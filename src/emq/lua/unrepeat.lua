-- unrepeat: schedule -> (no schedule)
--
-- Removes a repeating schedule: no tick of it fires after this step (a firer that planned
-- with it finds it gone). Jobs it already made are untouched. Safety belt: its slot is
-- marked freed with this step's server time, which is after every tick it fired (a tick
-- fires only once the server clock has reached it), so a later schedule that reuses the
-- slot never fires a tick at or below it and never makes an id this one made.
--
-- KEYS[1] repeats        ZSET    schedules, score = next tick ms
-- KEYS[2] repeat-slots  HASH    slot -> schedule key, or '~<ms>' once freed at that time
-- ARGV[1] prefix         string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] key            string  the schedule's key
-- Returns: 1 removed | 0 no such schedule
-- Errors: none
-- Derives: meta HASH (read only), repeat:<key> HASH
-- Includes: clock, layout
local k_repeats = KEYS[1]
local k_repeat_slots = KEYS[2]
local prefix = ARGV[1]
local key = ARGV[2]
use_layout(prefix)

local h = prefix .. 'repeat:' .. key
local slot = redis.call('HGET', h, 'slot')
if not slot then return 0 end
redis.call('HSET', k_repeat_slots, slot, '~' .. server_ms())
redis.call('DEL', h)
redis.call('ZREM', k_repeats, key)
return 1
