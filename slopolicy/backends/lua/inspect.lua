-- inspect: a tenant's buckets and live leases, read only.
--
-- KEYS  1 tenant bucket   2 tenant leases   3 lease hash   4.. lane buckets
-- ARGV  1 now ('' = server TIME)
-- Reply {now, tenant bucket {level, rate, burst} or {}, per lane bucket the
--        same, lane name of each live lease...}
local now = clock(ARGV[1])
local function read(key)
  local b = load(key, nil, nil, now)
  if not b then
    return {}
  end
  return {fmt(level_at(b, math.max(now, b.last))), fmt(b.rate), fmt(b.burst)}
end
local buckets = {}
for i = 4, #KEYS do
  buckets[#buckets + 1] = read(KEYS[i])
end
local lanes = {}
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. fmt(now), '+inf')
for _, id in ipairs(live) do
  local v = redis.call('HGET', KEYS[3], id)
  lanes[#lanes + 1] = v and string.match(v, '^%S+ (.*)$') or ''
end
return {fmt(now), read(KEYS[1]), buckets, lanes}
