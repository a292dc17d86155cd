-- wrk script: GET a random key of the set put.lua writes (run put.lua first, or
-- most answers are 404s; wrk counts those as "Non-2xx").
--   wrk -t1 -c64 -d10s --latency -s get.lua http://127.0.0.1:8080/
-- Settings by environment: CAIRN_NAMESPACE (default), CAIRN_KEYS (10000), CAIRN_TOKEN
-- (a bearer token to send).
local namespace = os.getenv("CAIRN_NAMESPACE") or "default"
local keys = tonumber(os.getenv("CAIRN_KEYS") or "10000")
local prefix = "/v1/namespaces/" .. namespace .. "/keys//bench/"
local headers = {}
local token = os.getenv("CAIRN_TOKEN")
if token then
  headers["Authorization"] = "Bearer " .. token
end

request = function()
  return wrk.format("GET", prefix .. math.random(0, keys - 1), headers)
end
