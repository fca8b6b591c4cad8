-- step: active -> active (a durable step of a running job recorded in its row)
--
-- Records one finished step of a handler (ctx.step, docs/steps.md) in the job's row as the
-- field step:<name> = '<server ms> <result JSON text>', with a 'step' event, in one step; or,
-- with mode 'failed', appends a 'step_failed' event only (a failed step is never recorded in
-- the row, so it runs again on the job's next run). A recorded step is returned by ctx.step on
-- every later run of the job instead of running again; every script that deletes the row
-- (complete, remove, drain, obliterate, the dead-letter purge, a kept row's expiry) deletes
-- its steps with it. Safety belt: fenced like extend and complete: the job must be in active
-- with an unexpired deadline (server clock) and the row's token must equal the caller's,
-- else nothing is written and no event appended; a name already recorded is refused, so a
-- step's result is written once and never replaced, except that a resend of the same record
-- (same name, same result: a reply lost on the way back) is answered as the first one was.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] events     STREAM  lifecycle events
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job id
-- ARGV[4] token      integer the caller's lease token
-- ARGV[5] mode       string  'ok' (record the step and append 'step') or 'failed' (append
--                            'step_failed' only)
-- ARGV[6] step       string  the step's name: 1-200 characters, no control characters
-- ARGV[7] value      string  mode 'ok': the result's JSON text; 'failed': the error's text
-- ARGV[8] took_ms    integer how long the step ran, ms (the worker's clock)
-- Returns: the server ms the step was recorded at (mode 'failed': the event's; a resend of a
--   record already made with the same result: the first record's, nothing written) | 'lost' (the
--   token no longer holds the lease: nothing written, no event) | 'gone' (no row: the job
--   was completed or removed)
-- Errors: EMQSTATE when mode 'ok' names a step the row has recorded already with another
--   result (nothing written)
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   meta HASH (read only), job:<id> HASH, events:archived STRING (read only)
-- Includes: answers, clock, events, layout
local k_active = KEYS[1]
local k_events = KEYS[2]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]
local token = ARGV[4]
local mode = ARGV[5]
local step = ARGV[6]
local value = ARGV[7]
local took_ms = ARGV[8]
use_layout(prefix)

use_events(k_events, maxlen)

local row = prefix .. 'job:' .. id
local field = 'step:' .. step
local f = redis.call('HMGET', row, 'token', 'state', 'attempts', field)
if not f[2] and no_job(prefix, id) then
  return ANSWER.gone
end
local now = server_ms()
local score = redis.call('ZSCORE', k_active, id)
if not (score and tonumber(score) > now and f[1] == token) then
  return ANSWER.lost
end
if mode == 'failed' then
  emit('event', 'step_failed', 'job', id, 'step', step, 'attempts', f[3] or '0',
    'took_ms', took_ms, 'error', value)
  return finish(now)
end
if f[4] then
  local at, from = string.match(f[4], '^(%d+) ()')
  if at and string.sub(f[4], from) == value then
    return tonumber(at)  -- the same record, resent: answered as the first, nothing written
  end
  return redis.error_reply('EMQSTATE step ' .. step .. ' of job ' .. id .. ' is recorded already')
end
redis.call('HSET', row, field, now .. ' ' .. value)
emit('event', 'step', 'job', id, 'step', step, 'attempts', f[3] or '0', 'took_ms', took_ms)
return finish(now)
