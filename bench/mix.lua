-- The challenge's request mix for wrk, per simulated iteration: 1 feed, 1 post, 0.15 like,
-- 0.02 create (46 % / 46 % / 6.9 % / 0.9 %), as the user journey in docs/performance.md.
-- Tokens come from the JSON file `worker seed -tokens` writes (env TOKENS).
local tokens = {}
local n = 0
function init(args)
  local f = assert(io.open(os.getenv("TOKENS") or "data/tokens.json"))
  local s = f:read("*a")
  f:close()
  for t in s:gmatch('"token":"([^"]+)"') do n = n + 1; tokens[n] = t end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 1000)
end
request = function()
  local r = math.random() * 2.17
  if r < 1.0 then
    return wrk.format("GET", "/feed")
  elseif r < 2.0 then
    return wrk.format("GET", "/posts/" .. math.random(1, 500000))
  end
  local h = { ["Authorization"] = "Bearer " .. tokens[math.random(1, n)], ["Content-Type"] = "application/json" }
  if r < 2.15 then
    return wrk.format("POST", "/posts/" .. math.random(1, 500000) .. "/like", h, "")
  end
  return wrk.format("POST", "/posts", h, '{"body":"load test says hi"}')
end
