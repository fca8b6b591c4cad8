-- progress: active -> active (the latest progress of running jobs)
--
-- Stores each job's latest progress value (JSON text) on its row as progress, with
-- progress_at (server ms), and appends a 'progress' event; a worker's flusher sends the
-- progress of all its jobs of a queue in one call, at most one value per job per
-- progress_interval_ms. Safety belt: fenced like extend: the job must be in active with an
-- unexpired deadline (server clock) and the row's token must equal the caller's, so a stale
-- worker (its lease lapsed, the job recovered or re-leased) never writes over the progress
-- of the attempt that now runs; a refused value changes nothing.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] events     STREAM  lifecycle events
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3..] (id, token, progress)*  one group per job; progress is JSON text
-- Returns: array, per job: progress_at (server ms) | 'lost' (the token no longer holds the
--          lease; nothing written, no event) | 'gone' (no row)
-- Errors: none
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   meta HASH (read only), job:<id> HASH, events:archived STRING (read only)
-- Includes: answers, clock, events, layout
local k_active = KEYS[1]
local k_events = KEYS[2]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
use_layout(prefix)

use_events(k_events, maxlen)

local now = server_ms()
local out = {}
for i = 3, #ARGV, 3 do
  local id, token, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'state')
  local held = f[1]
  if not f[2] and no_job(prefix, id) then
    out[#out + 1] = ANSWER.gone
  else
    local score = redis.call('ZSCORE', k_active, id)
    if score and tonumber(score) > now and held == token then
      redis.call('HSET', row, 'progress', value, 'progress_at', now)
      emit('event', 'progress', 'job', id, 'progress', value)
      out[#out + 1] = now
    else
      out[#out + 1] = ANSWER.lost
    end
  end
end
return finish(out)
