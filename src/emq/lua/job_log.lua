-- job_log: active -> active (lines appended to running jobs' logs)
--
-- Appends ctx.log lines to each job's log list logs:<id> as '<server ms> <attempt> <line>',
-- keeps its newest max_lines (the oldest are trimmed), sets its expiry to ttl_ms from now
-- and records the id in the logs index (score = that expiry) so obliterate finds every list;
-- index entries whose list has expired are pruned. A worker's flusher sends the lines of all
-- its jobs of a queue in one call. Safety belt: fenced like progress: a job's line is written
-- only while it is in active with an unexpired deadline (server clock) and the row's token
-- equals the caller's, so a stale attempt (its lease lapsed, the job recovered or re-leased)
-- never adds to the log of the attempt that now runs; a refused line changes nothing.
-- No event: a line is not a change of the job's state.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] logs       ZSET    the logs index: id -> when its logs:<id> expires, ms
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] max_lines  integer lines kept per job, 1..10000 (the oldest are trimmed)
-- ARGV[3] ttl_ms     integer how long the list is kept after this write, ms
-- ARGV[4..] (id, token, line)*  one group per line, oldest first; line is at most 8 KiB
-- Returns: array, per line: stored_at (server ms) | 'lost' (the token no longer holds the
--          lease; nothing written) | 'gone' (no row)
-- Errors: none
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   meta HASH (read only), job:<id> HASH (read only), logs:<id> LIST
-- Includes: answers, clock, layout
local k_active = KEYS[1]
local k_logs = KEYS[2]
local prefix = ARGV[1]
local max_lines = tonumber(ARGV[2])
local ttl_ms = tonumber(ARGV[3])
use_layout(prefix)

local now = server_ms()
local fence = {}    -- '<id> <token>' -> the attempt number (string), or the refusal
local written = {}  -- log keys written, in order, and the id of each
local ids = {}
local out = {}
for i = 4, #ARGV, 3 do
  local id, token, line = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local lease = id .. ' ' .. token
  local attempt = fence[lease]
  if attempt == nil then
    local f = redis.call('HMGET', prefix .. 'job:' .. id, 'token', 'state', 'attempts')
    if not f[2] and no_job(prefix, id) then
      attempt = ANSWER.gone
    else
      local score = redis.call('ZSCORE', k_active, id)
      if score and tonumber(score) > now and f[1] == token then
        attempt = '#' .. (f[3] or '0')
      else
        attempt = ANSWER.lost
      end
    end
    fence[lease] = attempt
  end
  if string.sub(attempt, 1, 1) == '#' then
    local key = prefix .. 'logs:' .. id
    redis.call('RPUSH', key, now .. ' ' .. string.sub(attempt, 2) .. ' ' .. line)
    if not ids[key] then
      ids[key] = id
      written[#written + 1] = key
    end
    out[#out + 1] = now
  else
    out[#out + 1] = attempt
  end
end
for _, key in ipairs(written) do
  redis.call('LTRIM', key, -max_lines, -1)
  redis.call('PEXPIRE', key, ttl_ms)
  redis.call('ZADD', k_logs, now + ttl_ms, ids[key])
end
if #written > 0 then
  redis.call('ZREMRANGEBYSCORE', k_logs, '-inf', '(' .. now)
end
return out
