-- waiters: telling result() callers that a job ended (docs/lua-contract.md, "Telling
-- result() waiters")
-- Includes: none
--
-- tell_waiters(prefix, id, n, outcome, value)  a job ended while n result() callers wait
--                       on it (its row's 'waiters' field, read by the caller): pushes n
--                       copies (at most 1,000) of outcome .. '\n' .. value onto done:<id>
--                       (a LIST kept 60 s); outcome is completed | dead | cancelled
local function tell_waiters(prefix, id, n, outcome, value)
  n = tonumber(n)
  if n and n > 0 then
    local k_done, message, items = prefix .. 'done:' .. id, outcome .. '\n' .. (value or ''), {}
    for i = 1, math.min(n, 1000) do items[i] = message end
    redis.call('LPUSH', k_done, unpack(items))
    redis.call('PEXPIRE', k_done, 60000)
  end
end
