-- GET /posts/:id with a random id, so every request reads a different row.
function init(args) math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 1000) end
request = function() return wrk.format("GET", "/posts/" .. math.random(1, 500000)) end
