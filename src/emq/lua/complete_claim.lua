-- complete_claim: active -> completed, then pending -> active, in one step
--
-- A worker's steady state: acknowledge the jobs it finished and lease the next ones in one
-- call. It runs complete.lua's code, then claim.lua's, each on the KEYS and ARGV its own
-- call would send (emq.calls.jobs builds them from the two calls),
-- so each part keeps every safety belt of its own script: a completion needs the unexpired
-- lease and its token, a claim reads the pause flag and every limit after the completions
-- freed their slots. The parts' events go out as one entry (layout 2). A resend of the call
-- (same request id) completes nothing twice (a completed job's row is gone: 'gone') and
-- gets the claim's stored reply back, as a resend of each script alone would.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] metrics    HASH    counters
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] meta       HASH    queue flags and limits
-- KEYS[5] completed  ZSET    kept completed jobs (complete's KEYS are 1..5)
-- KEYS[6] pending    ZSET    waiting jobs of the default lane
-- KEYS[7] schedule   ZSET    delayed jobs (claim's KEYS are 6, 1, 7, 4, 3, 2)
-- ARGV[1] parts      integer how many of the ARGV after it are complete's (n); the rest,
--                            ARGV[2 + n] on, are claim's
-- Returns: array: complete's reply (per job 'completed' | 'lost' | 'gone'), then claim's
--   reply (deadline, missing ids, retry_in, then per job id, token, attempts, ...)
-- Errors: those of claim.lua and complete.lua (a newer keyspace layout: EMQLAYOUT)
-- Derives: what complete.lua and claim.lua derive
-- Runs: complete, claim
-- Includes: events
local k_active = KEYS[1]
local k_metrics = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local k_completed = KEYS[5]
local k_pending = KEYS[6]
local k_schedule = KEYS[7]
local parts = tonumber(ARGV[1])

local function slice(t, from, to)
  local out = {}
  for i = from, to do out[#out + 1] = t[i] end
  return out
end

hold_events(true)  -- the completions' events join the claim's entry
local answers = run_complete({k_active, k_metrics, k_events, k_meta, k_completed},
  slice(ARGV, 2, 1 + parts))
hold_events(false)
local claimed = run_claim({k_pending, k_active, k_schedule, k_meta, k_events, k_metrics},
  slice(ARGV, 2 + parts, #ARGV))
return finish({answers, claimed})
