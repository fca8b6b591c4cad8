-- answers: the closed set of per-job answers of the finishing scripts
-- Includes: none
--
-- ANSWER                the closed set of per-job answers, decoded in emq.model.records.Answer
-- no_job(prefix, id)    whether a fenced call's job without a row is gone (true), or lives
--                       packed (layout 3: false), so the call goes on to answer lost
local ANSWER = {completed = 'completed', lost = 'lost', gone = 'gone', pending = 'pending',
  scheduled = 'scheduled', dead = 'dead', missing = 'missing', cancelled = 'cancelled'}

local function no_job(prefix, id)
  return redis.call('HEXISTS', prefix .. 'packed', id) == 0
end
