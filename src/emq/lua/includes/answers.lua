-- answers: the closed set of per-job answers of the finishing scripts
-- Includes: none
--
-- ANSWER                the closed set of per-job answers, decoded in emq.model.records.Answer
local ANSWER = {completed = 'completed', lost = 'lost', gone = 'gone', pending = 'pending',
  scheduled = 'scheduled', dead = 'dead', missing = 'missing', cancelled = 'cancelled'}
