-- renew: extend this replica's live leases of one tenant, and register again
-- any the store lost (expired while cut off, or gone in a restart), so the
-- tenant's caps count every request really in flight.
--
-- KEYS  1 tenant leases   2 lease hash   3.. lane lease zsets
-- ARGV  1 now ('' = server TIME)   2 lease ttl (s)   3 key grace (s)
--       then per lease: id, index of its lane zset in KEYS, cost, lane name
-- Reply {now, id of each lease that had been lost...}
local now = clock(ARGV[1])
local ttl, grace = tonumber(ARGV[2]), tonumber(ARGV[3])
local expiry = fmt(now + ttl)
local reply = {fmt(now)}
local touched = {KEYS[1], KEYS[2]}
for i = 4, #ARGV, 4 do
  local id, lane_key = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
  if redis.call('ZADD', KEYS[1], expiry, id) == 1 then
    reply[#reply + 1] = id
  end
  redis.call('ZADD', lane_key, expiry, id)
  redis.call('HSETNX', KEYS[2], id, ARGV[i + 2] .. ' ' .. ARGV[i + 3])
  touched[#touched + 1] = lane_key
end
expire(touched, math.ceil((ttl + grace) * 1000))
return reply
