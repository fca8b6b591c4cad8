-- wake: wake-up tokens for parked workers
-- Includes: none
--
-- wake(k_wake, n)       pushes min(n, 32) wake tokens for parked workers, list capped at 32
local function wake(k_wake, n)
  if n > 0 then
    local tokens = {}
    for i = 1, math.min(n, 32) do tokens[i] = '1' end
    if redis.call('LPUSH', k_wake, unpack(tokens)) > 32 then  -- the length after the push
      redis.call('LTRIM', k_wake, 0, 31)
    end
  end
end
