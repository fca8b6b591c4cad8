-- clock: the server clock, read with TIME
-- Includes: none
--
-- server_ms()           the server clock (TIME), integer ms
-- server_us()           the server clock (TIME), integer microseconds (exact below 2^53)
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function server_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
