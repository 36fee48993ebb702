-- POST /posts/:id/like by a random user (a real token from TOKENS) on a random post: every
-- request is a write, nearly all of them new likes (201).
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
  local h = { ["Authorization"] = "Bearer " .. tokens[math.random(1, n)], ["Content-Type"] = "application/json" }
  return wrk.format("POST", "/posts/" .. math.random(1, 500000) .. "/like", h, "")
end
