-- await_result: (no move) -> the outcome of an ended job, or a result() waiter counted
--
-- Queue.result's check: reads the job's row and, if the job has not ended, counts the caller
-- as a waiter (HINCRBY waiters 1) in this same step, so the script that ends the job later
-- (complete, fail, sweep_stalled, cancel, remove) reads the count and pushes the outcome onto
-- done:<id> for the caller's BLPOP. Safety belt: a live job's done:<id> can only hold
-- messages of an earlier end (the job was redriven since): they are deleted, so a waiter
-- never takes an old outcome for the new one. A job whose row is gone (completed without
-- keeping it, removed, expired) answers the message a waiter was sent, if one is left.
--
-- KEYS[1] job        HASH    the job's row, job:<id>
-- KEYS[2] done       LIST    outcomes pushed for the job's waiters, done:<id>
-- KEYS[3] meta       HASH    queue flags (layout)
-- ARGV[1] register   integer 1 = count the caller as a waiter; 0 = a re-check after a BLPOP
--                            slice: count it only if the row shows no waiter (a restart
--                            lost the count)
-- Returns: {'completed', result JSON text or '' (not kept)} | {'dead', last_error} |
--   {'cancelled', last_error} | {'told', 'outcome\nvalue'} (a message left on done:<id>) |
--   {'missing'} (no row) | {'waiting', state}
-- Errors: none
-- Derives: packed HASH, pending ZSET (a packed waiting job gets its row first: a waiter is
--   counted on its row; includes/packed.lua)
-- Includes: layout, packed
local k_job = KEYS[1]
local k_done = KEYS[2]
local k_meta = KEYS[3]
local register = ARGV[1]
local row = k_job
local prefix = string.sub(k_meta, 1, -5)
check_layout(redis.call('HGET', k_meta, 'layout'), prefix)
unpack_job(prefix, string.sub(k_job, #prefix + 5))

local f = redis.call('HMGET', row, 'state', 'result', 'last_error', 'cancelled', 'waiters')
if not f[1] then
  local told = redis.call('LPOP', k_done)
  if told then return {'told', told} end
  return {'missing'}
end
if f[1] == 'completed' then return {'completed', f[2] or ''} end
if f[1] == 'dead' then
  if f[4] then return {'cancelled', f[3] or ''} end
  return {'dead', f[3] or ''}
end
if register == '1' or (tonumber(f[5]) or 0) < 1 then
  redis.call('HINCRBY', row, 'waiters', 1)
end
redis.call('DEL', k_done)
return {'waiting', f[1]}
