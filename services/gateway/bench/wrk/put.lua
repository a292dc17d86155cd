-- wrk script: PUT a value to a random key of a fixed set, the gateway's write path.
--   wrk -t1 -c64 -d10s --latency -s put.lua http://127.0.0.1:8080/
-- Settings by environment: CAIRN_NAMESPACE (default), CAIRN_KEYS (10000 keys
-- under /bench/), CAIRN_VALUE_BYTES (100), CAIRN_TOKEN (a bearer token to send).
local namespace = os.getenv("CAIRN_NAMESPACE") or "default"
local keys = tonumber(os.getenv("CAIRN_KEYS") or "10000")
local value = string.rep("v", tonumber(os.getenv("CAIRN_VALUE_BYTES") or "100"))
local prefix = "/v1/namespaces/" .. namespace .. "/keys//bench/"
local headers = { ["Content-Type"] = "application/octet-stream" }
local token = os.getenv("CAIRN_TOKEN")
if token then
  headers["Authorization"] = "Bearer " .. token
end

request = function()
  return wrk.format("PUT", prefix .. math.random(0, keys - 1), headers, value)
end
